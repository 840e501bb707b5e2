"""What the status line and the banner show, gathered from the daemon (no Textual here)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Status:
    daemon: str = "connecting"  # "connecting", "up", "down"
    daemon_detail: str | None = None
    ollama_host: str | None = None
    ollama_reachable: bool | None = None  # None: not known yet
    ollama_error: str | None = None
    chat_model: str | None = None
    missing_models: tuple[str, ...] = ()
    memories: int | None = None
    held: int = 0
    pending: int = 0
    last_failure: str | None = None
    profile: str | None = None
    incognito: bool = False

    def with_daemon_status(self, data: dict[str, Any]) -> Status:
        ollama = data.get("ollama") or {}
        return replace(
            self,
            ollama_host=ollama.get("host"),
            ollama_reachable=bool(ollama.get("reachable")),
            ollama_error=ollama.get("error"),
            chat_model=data.get("chat_model"),
            pending=int(data.get("pending_extractions") or 0),
            last_failure=data.get("last_failure"),
        )

    def with_stats(self, stats: dict[str, Any]) -> Status:
        by_kind: dict[str, dict[str, int]] = stats.get("memories") or {}
        active = sum(statuses.get("active", 0) for statuses in by_kind.values())
        held = sum(statuses.get("held", 0) for statuses in by_kind.values())
        return replace(self, memories=active, held=held)

    def problems(self) -> list[str]:
        """What is wrong, each with how to fix it: the banner's lines, worst first."""
        out: list[str] = []
        if self.daemon == "down":
            out.append(
                f"The Navi daemon is not answering: {self.daemon_detail or 'unknown error'}. "
                "Memory and chat wait for it; check `navi daemon status`."
            )
            return out
        if self.ollama_reachable is False:
            # The daemon's error already names the host and the fix.
            fix = self.ollama_error or (
                f"nothing answers at {self.ollama_host}: start it with `ollama serve`, "
                "or set the host in Settings (F4)"
            )
            out.append(f"Ollama is not reachable: {fix}. Memory and settings still work.")
        for model in self.missing_models:
            out.append(
                f"Model {model!r} is not installed in Ollama. Run `ollama pull {model}` "
                "or pull it from Settings (F4)."
            )
        return out
