"""Where Ollama is: the host a value such as ``OLLAMA_HOST`` means, and whether this client's
``OLLAMA_HOST`` is the host the daemon uses. Standard library only, and apart from the LLM
layer: ``navi chat`` checks the host without loading that layer (~15 ms of its start-up).

The daemon is one per user and reads ``OLLAMA_HOST`` once, when it starts; a client started
later with another ``OLLAMA_HOST`` does not change it. Such a client says so in one line,
with the ways to change the daemon's host.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

DEFAULT_HOST = "http://127.0.0.1:11434"
DEFAULT_PORT = 11434

# Addresses a server listens on but a client cannot usefully connect to.
_UNSPECIFIED = {"0.0.0.0": "127.0.0.1", "::": "::1"}


def resolve_host(host: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The base URL to connect to: ``host``, else ``OLLAMA_HOST``, else the local default.

    Accepts what Ollama's own tools accept: ``127.0.0.1:11434``, ``example.com``,
    ``http://host:port``, ``https://host/path``, ``[::1]:11434``. A bare host gets port
    11434; ``http://`` / ``https://`` without a port mean 80 / 443, as in the ``ollama`` CLI.
    A listen-all address (``0.0.0.0``, ``::``) connects to loopback.
    """
    env = os.environ if environ is None else environ
    raw = (host or "").strip() or env.get("OLLAMA_HOST", "").strip()
    if not raw:
        return DEFAULT_HOST
    scheme, sep, rest = raw.partition("://")
    port = DEFAULT_PORT
    if not sep:
        scheme, rest = "http", raw
    elif scheme == "https":
        port = 443
    elif scheme == "http":
        port = 80
    split = urllib.parse.urlsplit(f"{scheme}://{rest}")
    name = split.hostname or "127.0.0.1"
    with contextlib.suppress(ValueError):  # a port that is not a number: keep the default
        port = split.port or port
    name = _UNSPECIFIED.get(name, name)
    try:
        if isinstance(ipaddress.ip_address(name), ipaddress.IPv6Address):
            name = f"[{name}]"
    except ValueError:
        pass
    path = split.path.strip("/")
    return f"{scheme}://{name}:{port}" + (f"/{path}" if path else "")


def _configured(settings_reply: Mapping[str, Any]) -> str | None:
    return ((settings_reply.get("settings") or {}).get("ollama") or {}).get("host")


def daemon_host(settings_reply: Mapping[str, Any]) -> str | None:
    """The host the daemon connects to, from its ``settings.get`` reply."""
    configured = _configured(settings_reply)
    if configured:
        return resolve_host(configured, {})
    return (settings_reply.get("unset") or {}).get("ollama.host")


def host_note(
    settings_reply: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> str | None:
    """One line when this process's ``OLLAMA_HOST`` differs from the daemon's host, else None."""
    raw = (os.environ if environ is None else environ).get("OLLAMA_HOST", "").strip()
    used = daemon_host(settings_reply)
    if not raw or not used or resolve_host(raw, {}) == used:
        return None
    if _configured(settings_reply):
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
