"""What a search hands back: the transcript's re-ranking and the hits read in full."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from navi_desktop.memory.documents import memory_text, message_text
from navi_desktop.memory.models import Memory, Message, SearchHit, Signal
from navi_desktop.memory.rerank import boost_named_and_dated, boost_sessions

if TYPE_CHECKING:
    from navi_desktop.memory.search import Key, Ranked
    from navi_desktop.memory.store import MemoryStore


class HitOps:
    """Shared by both backends; each reads rows its own way (``_rows_by_id``)."""

    async def _rows_by_id(
        self: MemoryStore, table: str, ids: list[int], columns: str = "*"
    ) -> list[Any]:
        if not ids:
            return []
        return await self.db.fetchall(
            f"SELECT {columns} FROM {table} WHERE id IN ({','.join('?' * len(ids))})", ids
        )

    async def _rerank_messages(
        self: MemoryStore,
        query: str,
        scores: dict[Key, float],
        detail: dict[Key, dict[str, Ranked]],
        limit: int,
    ) -> None:
        """The transcript-only re-ranking: session boost, then author and time (rerank.py)."""
        ids = [key[1] for key in scores if key[0] == "message"]
        if not ids:
            return
        rows = await self._rows_by_id("messages", ids, "id, session_id, name, content")
        found = {r[0]: (r[1], r[2], r[3]) for r in rows}
        boost_sessions(self.tuning, {m: s for m, (s, _, _) in found.items()}, scores, detail)
        boost_named_and_dated(self.tuning, query, found, scores, detail, limit)

    async def _hydrate(
        self: MemoryStore, fused: list[tuple[Key, float, dict[str, Ranked]]]
    ) -> list[SearchHit]:
        mem_ids = [key[1] for key, _, _ in fused if key[0] == "memory"]
        msg_ids = [key[1] for key, _, _ in fused if key[0] == "message"]
        memories = {r["id"]: r for r in await self._rows_by_id("memories", mem_ids)}
        messages = {r["id"]: r for r in await self._rows_by_id("messages", msg_ids)}
        hits = []
        for (kind, ident), score, ranks in fused:
            detail = {name: Signal(rank, raw) for name, (rank, raw) in ranks.items()}
            if kind == "memory" and ident in memories:
                row = memories[ident]
                hits.append(
                    SearchHit(
                        row["kind"],
                        ident,
                        memory_text(row),
                        score,
                        detail,
                        memory=Memory.from_row(row),
                    )
                )
            elif kind == "message" and ident in messages:
                row = messages[ident]
                hits.append(
                    SearchHit(
                        "message",
                        ident,
                        message_text(row),
                        score,
                        detail,
                        message=Message.from_row(row),
                    )
                )
        return hits
