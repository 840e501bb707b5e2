"""The words the chat shows about a reply and about a session end (no Textual here).

A session end's notice is a toast: what was learned, and what the model proposed that was
dropped and why, grouped by reason and capped, since one answer can drop dozens of items.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

STOPPED = "(stopped)"
# Under a reply whose daemon went away before it began: its message may not have got there.
UNSURE = "your message may not have been saved: reopen the session once the daemon is back"
FAILED = "(cut short: the model server failed before its end)"
CUT = (
    "(cut at its length limit: for longer replies raise “Reply limit” in Settings (F4),"
    " ollama.reply_max_tokens)"
)
MAX_REASONS = 3  # reasons named in a notice; the rest are counted
REASON_CHARS = 70
_DETAIL = re.compile(r"\s*\([^()]*\)$")  # "quote too short to show anything ('family')"


def reply_note(reply: dict[str, Any]) -> str | None:
    """The line under a finished reply: stopped by the user, cut short by the server, or cut
    at the length cap (a ``chat.send`` result, or a stored reply's meta)."""
    if reply.get("cancelled"):
        return STOPPED
    if reply.get("failed"):  # kept as far as it came (daemon/chat.py)
        return FAILED
    if reply.get("cut"):
        return CUT
    return None


def learned_text(learned: dict[str, list[int]]) -> str:
    """ "2 memories learned, 1 to review" from a session report's ids by action."""
    held = len(learned.get("held", []))
    kept = sum(len(ids) for action, ids in learned.items() if action != "held")
    text = f"{kept} {'memory' if kept == 1 else 'memories'} learned"
    return f"{text}, {held} to review in Memory → Inbox" if held else text


def reason_of(dropped: str) -> str:
    """Why one candidate was dropped: its report line is "what: why" (what may hold ": "
    itself, why does not), less the detail in brackets that differs per candidate."""
    why = dropped.rpartition(": ")[2]
    return _DETAIL.sub("", why) or why


def dropped_text(report: dict[str, Any]) -> str:
    """ "dropped 5 of 7: evidence quote not found in the conversation (×3); empty key; and 2
    more reasons" (empty when nothing was dropped)."""
    dropped = [str(d) for d in report.get("dropped") or []]
    if not dropped:
        return ""
    offered = max(int(report.get("offered") or 0), len(dropped))
    counts = Counter(reason_of(d) for d in dropped)
    named = [
        _clip(reason) + (f" (×{n})" if n > 1 else "")
        for reason, n in counts.most_common(MAX_REASONS)
    ]
    if (more := len(counts) - len(named)) > 0:
        named.append(f"and {more} more {'reason' if more == 1 else 'reasons'}")
    return f"dropped {len(dropped)} of {offered}: " + "; ".join(named)


def end_notice(report: dict[str, Any]) -> str:
    """What a processed session end did: "2 memories learned; dropped 1 of 3: why"."""
    dropped = dropped_text(report)
    learned = learned_text(report.get("learned") or {})
    return f"{learned}; {dropped}" if dropped else learned


def worth_telling(report: dict[str, Any]) -> bool:
    """A session end that learned or dropped something (an empty one goes unannounced)."""
    return any((report.get("learned") or {}).values()) or bool(report.get("dropped"))


def _clip(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1].rstrip() + "…"
