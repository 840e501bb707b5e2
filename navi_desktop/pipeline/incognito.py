"""Incognito: a conversation that lives in memory only and writes nothing to disk.

No message, session row, extraction, embedding, ledger row or timestamp is written. By
default it does not read memory either; ``read_memory`` lets it read (never write).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navi_desktop.daemon.wire import INCOGNITO_PREFIX
from navi_desktop.errors import InvalidInput
from navi_desktop.memory.feedback import Rating
from navi_desktop.pipeline.context import ContextSettings, TurnContext, build_context

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore


@dataclass
class IncognitoSession:
    read_memory: bool = False
    id: str = field(default_factory=lambda: INCOGNITO_PREFIX + uuid.uuid4().hex[:8])
    history: list[dict[str, Any]] = field(default_factory=list)
    ratings: dict[int, Rating] = field(default_factory=dict)  # by turn number, memory only

    async def context(
        self,
        store: MemoryStore | None,
        user_text: str,
        settings: ContextSettings | None = None,
    ) -> TurnContext:
        """The prompt for the next turn. Searching reads the store; nothing is recorded."""
        return await build_context(
            store if self.read_memory else None,
            user_text=user_text,
            history=self.history,
            session_id=None,
            first_turn=not self.history,
            settings=settings or ContextSettings(),
        )

    def add_turn(self, user_text: str, reply: str) -> None:
        self.add_user(user_text)
        self.add_reply(reply)

    def add_user(self, text: str) -> None:
        """The user's message, kept before its reply is asked for (a failed reply leaves it
        without one, to be answered again)."""
        self.history.append({"role": "user", "content": text})

    def add_reply(self, reply: str) -> None:
        self.history.append({"role": "assistant", "content": reply})

    def drop_last_turn(self) -> str:
        """Remove the last turn (the user's message and its reply) and return the user's text,
        to be answered again; the new answer adds the turn back."""
        for index in range(len(self.history) - 1, -1, -1):
            if self.history[index]["role"] == "user":
                text = str(self.history[index]["content"])
                del self.history[index:]
                # Its reply's rating goes with it (turn numbers count replies from 1).
                self.ratings.pop(sum(m["role"] == "assistant" for m in self.history) + 1, None)
                return text
        raise InvalidInput(f"session {self.id!r} has no message to answer again")

    def discard(self) -> None:
        self.history.clear()
        self.ratings.clear()


async def memory_to_read(
    session: IncognitoSession, path: Path, open_store: Callable[[], Awaitable[MemoryStore]]
) -> MemoryStore | None:
    """The store an incognito turn may read: none unless the session reads memory, and none
    for a profile that has no file yet. A missing profile reads as empty: opening it would
    create the file (and its -wal and -shm), and incognito creates and touches nothing."""
    if not session.read_memory or not path.exists():
        return None
    return await open_store()
