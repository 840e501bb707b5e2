"""What the status line and the banner show, gathered from the daemon (no Textual here)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from navi_desktop.config import capped

Counts = Mapping[str, Mapping[str, int]]  # memory.stats "memories": kind -> status -> count


@dataclass(frozen=True)
class Learning:
    """A session end under way: chunk ``part`` of ``parts`` (0 of 0: starting), and whether
    it waits for the user to be idle."""

    part: int = 0
    parts: int = 0
    waiting: bool = False


def learning_of(extracting: Any, profile: str | None) -> tuple[Learning, ...]:
    """The profile's session ends under way, from ``daemon.status`` "extracting" or a
    ``session.progress`` notification (one entry per session end, any profile)."""
    out = []
    for end in extracting if isinstance(extracting, list) else []:
        if isinstance(end, dict) and end.get("profile") == profile:
            out.append(
                Learning(
                    int(end.get("chunk") or 0),
                    int(end.get("chunks") or 0),
                    bool(end.get("waiting")),
                )
            )
    return tuple(out)


def daemon_fields(
    status: dict[str, Any], stats: dict[str, Any] | None, profile: str | None = None
) -> dict[str, Any]:
    """The ``Status`` fields that ``daemon.status`` and ``memory.stats`` answer (``stats``
    None: the profile could not be read)."""
    ollama = status.get("ollama") or {}
    broken = (status.get("profile_errors") or {}).get(profile) or {}
    return {
        "ollama_host": ollama.get("host"),
        "ollama_reachable": bool(ollama.get("reachable")),
        "ollama_error": ollama.get("error"),
        # A separate embedding host that does not answer (its error names it and the fix).
        "embedding_error": (status.get("embedding_ollama") or {}).get("error"),
        "chat_model": status.get("chat_model"),
        "pending": int(status.get("pending_extractions") or 0),
        "last_failure": status.get("last_failure"),
        "embedding_problem": (status.get("embedding_problems") or {}).get(profile),
        "counts": None if stats is None else stats.get("memories") or {},
        "config_errors": tuple(str(e) for e in status.get("config_errors") or ()),
        "env_errors": tuple(str(e) for e in status.get("env_errors") or ()),
        "profile_error": broken.get("message"),
        "learning": learning_of(status.get("extracting"), profile),
    }


def same_model(a: str, b: str) -> bool:
    """Ollama names ``llama3.2`` and ``llama3.2:latest`` the same model."""
    return a == b or a.removesuffix(":latest") == b.removesuffix(":latest")


@dataclass(frozen=True)
class Status:
    daemon: str = "connecting"  # "connecting", "up", "down"
    daemon_detail: str | None = None
    ollama_host: str | None = None
    ollama_reachable: bool | None = None  # None: not known yet
    ollama_error: str | None = None
    embedding_error: str | None = None  # a separate embedding host does not answer: why
    embedding_problem: str | None = None  # the model's garbage left texts without vectors
    chat_model: str | None = None
    missing_models: tuple[str, ...] = ()
    counts: Counts | None = None  # None: not known yet
    pending: int = 0
    last_failure: str | None = None
    profile: str | None = None
    incognito: bool = False
    profile_error: str | None = None  # the profile's file cannot be used: why, and the fix
    config_errors: tuple[str, ...] = ()  # config.toml's problems, with what stays in force
    env_errors: tuple[str, ...] = ()  # the daemon's OLLAMA_HOST that is no host, and so on
    host_note: str | None = None  # this shell's OLLAMA_HOST is not the daemon's (and the fix)
    learning: tuple[Learning, ...] = ()  # session ends under way for this profile

    def count(self, status: str, kind: str | None = None) -> int:
        """Memories with this status (of this kind, or of every kind)."""
        kinds = [kind] if kind else list(self.counts or {})
        return sum((self.counts or {}).get(k, {}).get(status, 0) for k in kinds)

    @property
    def memories(self) -> int | None:
        return None if self.counts is None else self.count("active")

    @property
    def held(self) -> int:
        return self.count("held")

    def problems(self, config: bool = True) -> list[str]:
        """What is wrong, each with how to fix it: the banner's lines, worst first;
        config.toml's problems unless not ``config``."""
        out: list[str] = []
        if self.daemon == "down":
            out.append(
                f"The Navi daemon is not answering: {self.daemon_detail or 'unknown error'}. "
                "Memory and chat wait for it; check `navi daemon status`."
            )
            return out
        if self.profile_error:  # its words name the file, what is wrong and the fix
            out.append(f"Memory {self.profile!r} cannot be used: {self.profile_error}")
        if self.host_note:
            out.append(self.host_note)
        if self.ollama_reachable is False:
            # The daemon's error already names the host and the fix.
            fix = self.ollama_error or (
                f"nothing answers at {self.ollama_host}: start it with `ollama serve`, "
                "or set the host in Settings (F4)"
            )
            out.append(f"Ollama is not reachable: {fix}. Memory and settings still work.")
        if self.embedding_error:
            out.append(f"Embeddings: {self.embedding_error}. Search uses words only meanwhile.")
        if self.embedding_problem:
            out.append(
                f"Embeddings: {self.embedding_problem}; what has no vector is found by its words."
                " Pull the embedding model again, or choose another in Settings (F4)."
            )
        for model in self.missing_models:
            out.append(
                f"Model {model!r} is not installed in Ollama. Run `ollama pull {model}` "
                "or pull it from Settings (F4)."
            )
        out += list(self.env_errors)
        if config:
            out += [f"config.toml: {problem}" for problem in capped(list(self.config_errors))]
        return out
