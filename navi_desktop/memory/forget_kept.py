"""What a forget leaves that a person may think it takes: the conversations behind a memory.

A forget matches the memory's exact value and evidence as whole words. The conversation an
episode sums up, or a fact was learned from, says the same thing in other words, and stays:
the preview names those sessions (``kept``, in words; ``kept_sessions``, for --json) and how
to delete them. Both backends run this (the SQL is written once, forget.py's way).
"""

from __future__ import annotations

import shlex
from typing import Any

from navi_desktop.memory.scrub_plan import counted
from navi_desktop.memory.sessions import FIRST_SAID
from navi_desktop.paths import profile_flag

NAME_CUT = 60  # characters of a title or first message, as the sessions list shows them
MAX_NAMED = 3  # sessions named in the line; --json lists them all


async def kept_after(
    db: Any, chain: list[Any], profile: str | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """(the line, the sessions) for ``chain`` (the memory, then its earlier versions): an
    episode's own session, or every session the memory or a version was learned in. Nothing
    for a memory added by hand or imported, or a session deleted or emptied since. The delete
    commands name ``profile``: without it they would reach the default profile's sessions."""
    row = chain[0]
    rows = chain[:1] if row["kind"] == "episode" else chain
    ids = list(dict.fromkeys(r["session_id"] for r in rows if r["session_id"]))
    found = [s for sid in ids if (s := await _session(db, sid)) is not None]
    if not found:
        return None, []
    sessions = [{"id": sid, "title": title, "messages": count} for sid, title, _, count in found]
    if row["kind"] == "episode":
        _, title, first, count = found[0]
        return (
            f"The conversation it sums up stays: {_named(title, first)},"
            f" {counted(count, 'message', 'messages')}. Delete that session to remove it too."
        ), sessions
    named = [
        f"{_named(title, first)}, {counted(count, 'message', 'messages')}"
        for _, title, first, count in found[:MAX_NAMED]
    ]
    if len(found) > MAX_NAMED:
        named.append(counted(len(found) - MAX_NAMED, "other session", "other sessions"))
    where = named[0] if len(named) == 1 else ", in ".join(named[:-1]) + ", and in " + named[-1]
    commands = "; ".join(
        f"navi sessions delete {shlex.quote(s[0])}{profile_flag(profile)}"
        for s in found[:MAX_NAMED]
    )
    which = "the session" if len(found) == 1 else "those sessions"
    return (
        f"Learned in {where}: other wordings of it there stay."
        f" Delete {which} to remove them: {commands}"
    ), sessions


async def _session(db: Any, session_id: str) -> tuple[str, str | None, str | None, int] | None:
    """(id, title, what the user said first, message count), or None if it is gone or empty."""
    found = await db.fetchone(
        f"SELECT title, {FIRST_SAID},"
        " (SELECT count(*) FROM messages c WHERE c.session_id = sessions.id)"
        " FROM sessions WHERE id = ?",
        (session_id,),
    )
    if found is None or not found[2]:  # deleted, or emptied
        return None
    return session_id, found[0], found[1], int(found[2])


def _named(title: str | None, first: str | None) -> str:
    """A session named as the sessions list names it: its title, else what the user said
    first."""
    if title:
        return f"\u201c{_cut(title)}\u201d"
    if first:
        return f"the session that starts \u201c{_cut(first)}\u201d"
    return "an untitled session"


def _cut(text: str) -> str:
    start = " ".join(text.split())
    return start[:NAME_CUT].rstrip() + "…" * (len(start) > NAME_CUT)
