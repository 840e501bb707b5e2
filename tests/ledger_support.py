"""A chat turn as the daemon records it, for the ledger and feedback tests."""

from __future__ import annotations

from navi_desktop.memory.ledger import Injection
from navi_desktop.memory.models import Signal


async def a_turn(store, session_id: str, memory_ids: list[int]) -> tuple[int, int]:
    """A user message that used ``memory_ids`` and its reply; their ids."""
    user = await store.save_message(session_id, "user", "Where do I live?")
    used = [
        Injection(m, n, 1.0, {"text": Signal(n, 1.0)}, "relevant")
        for n, m in enumerate(memory_ids, 1)
    ]
    await store.record_injections(session_id, user.id, used)
    reply = await store.save_message(session_id, "assistant", "You live in Porto.")
    return user.id, reply.id
