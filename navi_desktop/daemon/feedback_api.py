"""Rating replies: ``chat.rate``, ``chat.ratings`` and ``feedback.flagged``.

An incognito session's ratings stay in the daemon's memory with its transcript and go with
it; there a reply is named by its turn number (1 = the first reply), as it has no stored id.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from navi_desktop.daemon.method_params import ProfileParams, SessionId
from navi_desktop.daemon.params import RowId, takes, text
from navi_desktop.errors import NotFound
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.feedback import MAX_NOTE, Rating, check_rating

if TYPE_CHECKING:
    from navi_desktop.daemon.dispatch import Handler
    from navi_desktop.daemon.service import Service
    from navi_desktop.pipeline.incognito import IncognitoSession

Note = text(MAX_NOTE, blank=True)


class ChatRate(ProfileParams):
    session_id: SessionId
    message_id: RowId | None = None  # None: the session's last reply
    rating: Literal["up", "down"]
    note: Note | None = None
    # True: only an incognito session's turn is rated (in the daemon's memory); a stored
    # session of that id is refused, never written.
    incognito: bool | None = None


class ChatRatings(ProfileParams):
    session_id: SessionId


class Flagged(ProfileParams):
    pass


def handlers(service: Service) -> dict[str, Handler]:
    return {
        "chat.rate": partial(rate, service),
        "chat.ratings": partial(ratings, service),
        "feedback.flagged": partial(flagged, service),
    }


@takes(ChatRate)
async def rate(service: Service, params: ChatRate, peer: Any) -> dict[str, Any]:
    session = service.incognito_session(params.session_id)
    if session is not None:
        return _rate_incognito(session, params).to_dict() | {"incognito": True}
    if params.incognito:
        raise NotFound(
            f"no incognito session with id {params.session_id!r} (ended, or the daemon restarted);"
            " nothing was rated"
        )
    profile = service.profile(params.profile)
    store = await service.store(profile)
    rating = await store.rate_reply(
        params.session_id, params.rating, message_id=params.message_id, note=params.note
    )
    # The inspector flags the memories of a down-rated reply: it reloads on this.
    await service.broadcast("memory", "memory.changed", {"profile": profile, "method": "chat.rate"})
    return rating.to_dict() | {"incognito": False}


@takes(ChatRatings)
async def ratings(service: Service, params: ChatRatings, peer: Any) -> dict[str, Any]:
    session = service.incognito_session(params.session_id)
    if session is not None:
        found = sorted(session.ratings.values(), key=lambda r: r.message_id)
    else:
        store = await service.read_store(service.profile(params.profile))
        found = await store.ratings(params.session_id)
    return {"ratings": [r.to_dict() for r in found]}


@takes(Flagged)
async def flagged(service: Service, params: Flagged, peer: Any) -> dict[str, Any]:
    """Memories that went into down-rated replies, by id (JSON keys are text)."""
    store = await service.read_store(service.profile(params.profile))
    return {"memories": {str(k): v for k, v in (await store.flagged_memories()).items()}}


def _rate_incognito(session: IncognitoSession, params: ChatRate) -> Rating:
    _, note = check_rating(params.rating, params.note)
    replies = sum(1 for m in session.history if m["role"] == "assistant")
    if replies == 0:
        raise NotFound(f"session {session.id!r} has no reply to rate yet")
    turn = replies if params.message_id is None else params.message_id
    if turn > replies:
        raise NotFound(
            f"session {session.id!r} has {replies} {'reply' if replies == 1 else 'replies'}:"
            f" an incognito reply is named by its turn number, 1 to {replies}"
        )
    rating = Rating(turn, session.id, None, params.rating, note, now_iso())
    session.ratings[turn] = rating
    return rating
