"""The memory engine: one SQLite file per profile, hybrid search, real forgetting.

Imports neither Textual nor the Ollama client; usable and testable on its own.
"""

from navi_desktop.memory.facts import NewMemory, WriteResult
from navi_desktop.memory.forget import ForgetReport
from navi_desktop.memory.models import HistoryEntry, Memory, Message, SearchHit, Session, Signal
from navi_desktop.memory.store import MemoryStore

__all__ = [
    "ForgetReport",
    "HistoryEntry",
    "Memory",
    "MemoryStore",
    "Message",
    "NewMemory",
    "SearchHit",
    "Session",
    "Signal",
    "WriteResult",
]
