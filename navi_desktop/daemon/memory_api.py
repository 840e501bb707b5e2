"""``memory.*`` over the socket: the daemon runs the store's methods, and ``RemoteMemory``
gives clients (the CLI, later the TUI) the same methods and return types as ``MemoryStore``,
so a command has one code path whether it opens the file itself or asks the daemon."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from navi_desktop.memory.entity_profiles import EntityProfile, EntitySummary
from navi_desktop.memory.exchange import ImportReport
from navi_desktop.memory.facts import WriteResult
from navi_desktop.memory.forget import ForgetPreview, ForgetReport
from navi_desktop.memory.ledger import Injection
from navi_desktop.memory.models import HistoryEntry, Memory, Message, SearchHit, Signal

# method -> (store method, JSON form of its result, does it change memory?). Each one's
# parameters are declared in memory_params.py (daemon side): one without is refused.


def _memories(items: list[Memory]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in items]


def _write(r: WriteResult) -> dict[str, Any]:
    return {
        "action": r.action,
        "memory": r.memory.to_dict() if r.memory else None,
        "replaced": r.replaced,
    }


def _entities(r: tuple[list[EntitySummary], int]) -> dict[str, Any]:
    return {"entities": [e.to_dict() for e in r[0]], "total": r[1]}


METHODS: dict[str, tuple[str, Callable[[Any], Any], bool]] = {
    "memory.add": ("add_memory", _write, True),
    "memory.get": ("get", lambda m: m.to_dict(), False),
    "memory.versions": ("versions", _memories, False),
    "memory.history": ("history", lambda h: [e.to_dict() for e in h], False),
    "memory.list": ("list_memories", lambda r: {"memories": _memories(r[0]), "total": r[1]}, False),
    "memory.search": ("search", lambda hits: [h.to_dict() for h in hits], False),
    "memory.correct": ("correct", lambda m: m.to_dict(), True),
    "memory.edit": ("edit", lambda m: m.to_dict(), True),
    "memory.pin": ("pin", lambda m: m.to_dict(), True),
    "memory.confirm": ("confirm", lambda m: m.to_dict(), True),
    "memory.archive": ("archive", lambda m: m.to_dict(), True),
    "memory.accept": ("accept", lambda m: m.to_dict(), True),
    "memory.forget": ("forget", asdict, True),
    # the file (or the server's tables) rewritten without free space, after a forget
    "memory.compact": ("compact", lambda sizes: sizes, False),
    # where else a memory's value occurs, per scope, before it is forgotten (changes nothing);
    # its parameters: memory_params.MODELS["memory.forget_preview"] (one memory id)
    "memory.forget_preview": ("forget_preview", asdict, False),
    "memory.export": ("export_data", lambda d: d, False),
    "memory.export_markdown": ("export_markdown", lambda t: t, False),
    "memory.import": ("import_data", asdict, True),
    # an export larger than a request may be, read by the daemon from its path
    "memory.import_file": ("import_file", asdict, True),
    "memory.stats": ("stats", lambda s: s, False),
    # what went into the prompt answering a user message (TurnResult.user_message_id)
    "memory.used": ("injections_for", lambda items: [i.to_dict() for i in items], False),
    # entity profiles (memory/entity_profiles.py)
    "memory.entity": ("entity", lambda p: p.to_dict(), False),
    "memory.entities": ("list_entities", _entities, False),
    "memory.rename_entity": ("rename_entity", lambda p: p.to_dict(), True),
    "memory.merge_entities": ("merge_entities", lambda p: p.to_dict(), True),
}


def _import_report(r: dict[str, Any]) -> ImportReport:
    ids = {int(k): v for k, v in r["ids"].items()}
    return ImportReport(
        r["added"], r["skipped"], r["blocked"], ids, r["new_ids"], r.get("nuls_replaced", 0)
    )


class RemoteMemory:
    """The subset of ``MemoryStore`` the CLI uses, answered by the daemon."""

    def __init__(self, client: Any, profile: str) -> None:
        self._client = client
        self._profile = profile

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self._client.call(
            method, {"profile": self._profile, "args": list(args), "kwargs": kwargs}
        )

    async def add_memory(self, value: str, **fields: Any) -> WriteResult:
        r = await self._call("memory.add", value, **fields)
        return WriteResult(r["action"], _memory(r["memory"]), r["replaced"])

    async def get(self, memory_id: int) -> Memory:
        return _memory(await self._call("memory.get", memory_id))

    async def versions(self, memory_id: int) -> list[Memory]:
        return [_memory(m) for m in await self._call("memory.versions", memory_id)]

    async def history(self, memory_id: int) -> list[HistoryEntry]:
        return [HistoryEntry(**e) for e in await self._call("memory.history", memory_id)]

    async def list_memories(self, **filters: Any) -> tuple[list[Memory], int]:
        r = await self._call("memory.list", **filters)
        return [_memory(m) for m in r["memories"]], r["total"]

    async def search(self, query: str, **options: Any) -> list[SearchHit]:
        return [_hit(h) for h in await self._call("memory.search", query, **options)]

    async def correct(self, memory_id: int, value: str, **options: Any) -> Memory:
        return _memory(await self._call("memory.correct", memory_id, value, **options))

    async def edit(self, memory_id: int, **changes: Any) -> Memory:
        return _memory(await self._call("memory.edit", memory_id, **changes))

    async def pin(self, memory_id: int, pinned: bool = True) -> Memory:
        return _memory(await self._call("memory.pin", memory_id, pinned))

    async def confirm(self, memory_id: int) -> Memory:
        return _memory(await self._call("memory.confirm", memory_id))

    async def forget(self, memory_id: int, *, scope: str = "everywhere") -> ForgetReport:
        return ForgetReport(**await self._call("memory.forget", memory_id, scope=scope))

    async def compact(self) -> dict[str, Any]:
        return await self._call("memory.compact")

    async def forget_preview(self, memory_id: int) -> ForgetPreview:
        return ForgetPreview(**await self._call("memory.forget_preview", memory_id))

    async def export_data(self, **options: Any) -> dict[str, Any]:
        return await self._call("memory.export", **options)

    async def export_markdown(self) -> str:
        return await self._call("memory.export_markdown")

    async def import_data(self, data: dict[str, Any]) -> ImportReport:
        return _import_report(await self._call("memory.import", data))

    async def import_file(self, path: Any) -> ImportReport:
        return _import_report(await self._call("memory.import_file", str(path)))

    async def stats(self) -> dict[str, Any]:
        return await self._call("memory.stats")

    async def injections_for(self, message_id: int) -> list[Injection]:
        return [_injection(i) for i in await self._call("memory.used", message_id)]

    async def entity(self, name: str, **options: Any) -> EntityProfile:
        return EntityProfile.from_dict(await self._call("memory.entity", name, **options))

    async def list_entities(self, **options: Any) -> tuple[list[EntitySummary], int]:
        r = await self._call("memory.entities", **options)
        return [EntitySummary(**e) for e in r["entities"]], r["total"]

    async def rename_entity(self, name: str, new_name: str) -> EntityProfile:
        return EntityProfile.from_dict(await self._call("memory.rename_entity", name, new_name))

    async def merge_entities(self, name: str, other: str) -> EntityProfile:
        return EntityProfile.from_dict(await self._call("memory.merge_entities", name, other))

    async def backfill_embeddings(self, **options: Any) -> int:
        return 0  # the daemon embeds in the background


def _memory(data: dict[str, Any] | None) -> Memory:
    return Memory(**data) if data else None  # type: ignore[return-value]


def _hit(h: dict[str, Any]) -> SearchHit:
    return SearchHit(
        kind=h["kind"],
        id=h["id"],
        text=h["text"],
        score=h["score"],
        signals={k: Signal(**v) for k, v in h["signals"].items()},
        memory=Memory(**h["memory"]) if h["memory"] else None,
        message=Message(**h["message"]) if h["message"] else None,
    )


def _injection(i: dict[str, Any]) -> Injection:
    return Injection(
        memory_id=i["memory_id"],
        rank=i["rank"],
        score=i["score"],
        signals={k: Signal(**v) for k, v in i["signals"].items()},
        reason=i["reason"],
        memory=Memory(**i["memory"]) if i["memory"] else None,
    )
