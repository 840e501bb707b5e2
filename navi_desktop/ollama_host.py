"""Whether this client's ``OLLAMA_HOST`` is the host the daemon uses (stdlib only).

The daemon is one per user and reads ``OLLAMA_HOST`` once, when it starts; a client started
later with another ``OLLAMA_HOST`` does not change it. Such a client says so in one line,
with the ways to change the daemon's host.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


def daemon_host(settings_reply: Mapping[str, Any]) -> str | None:
    """The host the daemon connects to, from its ``settings.get`` reply."""
    from navi_desktop.llm.types import resolve_host

    configured = ((settings_reply.get("settings") or {}).get("ollama") or {}).get("host")
    if configured:
        return resolve_host(configured, {})
    return (settings_reply.get("unset") or {}).get("ollama.host")


def host_note(
    settings_reply: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> str | None:
    """One line when this process's ``OLLAMA_HOST`` differs from the daemon's host, else None."""
    from navi_desktop.llm.types import resolve_host

    raw = (os.environ if environ is None else environ).get("OLLAMA_HOST", "").strip()
    used = daemon_host(settings_reply)
    if not raw or not used or resolve_host(raw, {}) == used:
        return None
    configured = ((settings_reply.get("settings") or {}).get("ollama") or {}).get("host")
    if configured:
        change = "config.toml sets it: change ollama.host in Settings (F4) or in config.toml"
    else:
        change = (
            "set the host in Settings (F4) or config.toml, or run `navi daemon stop` and start"
            " Navi again with this OLLAMA_HOST"
        )
    return (
        f"OLLAMA_HOST={raw} is not used: the Navi daemon (one per user) talks to Ollama at"
        f" {used}; {change}."
    )
