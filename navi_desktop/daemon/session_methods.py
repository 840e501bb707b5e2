"""The daemon's ``sessions.*`` methods, mixed into :class:`~navi_desktop.daemon.service.Service`:
list, show, rename, delete, export, keep an incognito session, and end sessions now."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from navi_desktop.daemon import method_params as mp
from navi_desktop.daemon.params import takes
from navi_desktop.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from navi_desktop.daemon.service import Service
    from navi_desktop.pipeline.session_end import EndReport


class SessionMethods:
    @takes(mp.SessionsCreate)
    async def sessions_create(
        self: Service, params: mp.SessionsCreate, peer: Any
    ) -> dict[str, Any]:
        if params.incognito:
            return {"id": self._new_incognito().id, "incognito": True}
        store = await self.store(self.profile(params.profile))
        created = await store.create_session((params.title or "").strip() or None)
        return created.to_dict() | {"incognito": False}

    @takes(mp.SessionsList)
    async def sessions_list(
        self: Service, params: mp.SessionsList, peer: Any
    ) -> list[dict[str, Any]]:
        store = await self.read_store(self.profile(params.profile))
        return [s.to_dict() for s in await store.list_sessions(limit=params.limit)]

    @takes(mp.SessionById)
    async def sessions_show(self: Service, params: mp.SessionById, peer: Any) -> dict[str, Any]:
        store = await self.read_store(self.profile(params.profile))
        session_id = params.id
        session = await store.get_session(session_id)
        return session.to_dict() | {
            "messages": [m.to_dict() for m in await store.messages(session_id)]
        }

    @takes(mp.SessionsRename)
    async def sessions_rename(
        self: Service, params: mp.SessionsRename, peer: Any
    ) -> dict[str, Any]:
        profile = self.profile(params.profile)
        renamed = await (await self.store(profile)).rename_session(params.id, params.title)
        # Every open app's list follows a rename made elsewhere (the CLI, another window).
        await self.broadcast(
            "sessions", "session.updated", {"profile": profile, "session_id": params.id}
        )
        return renamed.to_dict()

    @takes(mp.SessionById)
    async def sessions_delete(self: Service, params: mp.SessionById, peer: Any) -> dict[str, Any]:
        session_id = params.id
        if self._incognito.pop(session_id, None) is not None:
            return {"deleted": session_id, "messages": 0}
        profile = self.profile(params.profile)
        if (timer := self._timers.pop((profile, session_id), None)) is not None:
            timer.cancel()
        count = await (await self.store(profile)).delete_session(session_id)
        # "deleted": an app that has this session open closes it (its sends would fail).
        await self.broadcast(
            "sessions",
            "session.updated",
            {"profile": profile, "session_id": session_id, "deleted": True},
        )
        return {"deleted": session_id, "messages": count}

    @takes(mp.SessionById)
    async def sessions_export(self: Service, params: mp.SessionById, peer: Any) -> dict[str, Any]:
        store = await self.read_store(self.profile(params.profile))
        return {"markdown": await store.export_session(params.id)}

    @takes(mp.SessionsKeep)
    async def sessions_keep(self: Service, params: mp.SessionsKeep, peer: Any) -> dict[str, Any]:
        """Turn an incognito session into a stored one: from now on it is a normal session
        (saved, ended after inactivity, learned from)."""
        session_id = params.id
        incognito = self._incognito.get(session_id)
        if incognito is None:
            raise NotFound(f"no incognito session with id {session_id!r}")
        if session_id in self._turns:
            raise InvalidInput(f"session {session_id} is answering; wait or cancel it first")
        title = (params.title or "").strip() or "Kept from incognito"
        profile = self.profile(params.profile)
        # Out of the map before the first await: a message sent meanwhile cannot land in it.
        self._incognito.pop(session_id)
        try:
            store = await self.store(profile)
            created = await store.create_session(title)
            saved = 0
            for message in incognito.history:
                if message["role"] in ("user", "assistant") and message["content"]:
                    # An empty reply is a cancelled one; chat.send does not store those either.
                    await store.save_message(created.id, message["role"], message["content"])
                    saved += 1
        except BaseException:
            self._incognito[session_id] = incognito  # not kept: still incognito, nothing lost
            raise
        self._touch(profile, created.id)
        await self.broadcast(
            "sessions", "session.updated", {"profile": profile, "session_id": created.id}
        )
        kept = await store.get_session(created.id)
        return kept.to_dict() | {"incognito": False, "messages": saved}

    @takes(mp.SessionsEnd)
    async def sessions_end(
        self: Service, params: mp.SessionsEnd, peer: Any
    ) -> list[dict[str, Any]]:
        """End one session (``id``) or every unprocessed one (``all``) now."""
        profile = self.profile(params.profile)
        store = await self.store(profile)
        if params.all or params.id is None:
            for sid in list(self._incognito):
                self._incognito.pop(sid).discard()
            ids = [s.id for s in await store.sessions_to_process(include_open=True)]
        else:
            session_id = params.id
            if session_id in self._incognito:
                self._incognito.pop(session_id).discard()
                return [{"session_id": session_id, "status": "discarded"}]
            await store.get_session(session_id)
            ids = [session_id]
        reports = [await self.end(profile, sid, "explicit") for sid in ids]
        return [_report(r) for r in reports]


def _report(r: EndReport) -> dict[str, Any]:
    return {
        "session_id": r.session_id,
        "status": r.status,
        "reason": r.reason,
        "learned": r.learned,
        "dropped": r.dropped,
        "offered": r.offered,
        "notes": r.notes,
        "chunks": r.chunks,
        "llm_calls": r.llm_calls,
        "summary_id": r.summary_id,
        "profile_updated": r.profile_updated,
    }
