"""Where Ollama is: the host a value such as ``OLLAMA_HOST`` means, which host embeds (it may
be another machine's, with a GPU), and whether this client's ``OLLAMA_HOST`` is the host the
daemon uses. Standard library only (and errors.py), apart from the LLM layer: ``navi chat``
checks the host without loading that layer (~15 ms of its start-up).

The daemon is one per user and reads ``OLLAMA_HOST`` (and ``NAVI_EMBEDDING_HOST``) once, when
it starts; a client started later with another ``OLLAMA_HOST`` does not change it. Such a
client says so in one line, with the ways to change the daemon's host.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from navi_desktop.errors import InvalidInput

DEFAULT_HOST = "http://127.0.0.1:11434"
DEFAULT_PORT = 11434
EMBEDDING_HOST_ENV = "NAVI_EMBEDDING_HOST"

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
    raw = (host or "").strip() or env_host("OLLAMA_HOST", env) or ""
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
    try:
        split = urllib.parse.urlsplit(f"{scheme}://{rest}")
    except ValueError as exc:  # "http://[::1": every way in checks first; this is the net
        raise InvalidInput(
            f"{shown_url(raw)!r} is not a host: {exc}; use host:port or a URL"
        ) from exc
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


# A password may hold "/" or "@": everything up to the last "@" goes.
_PASSWORD_RE = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*://)?[^:/@\s]*:)\S*@")
_SECRET_PARAM_RE = re.compile(r"((?:password|token|key|secret)=)[^&\s]+", re.IGNORECASE)


def shown_url(value: str) -> str:
    """A URL (a host, a DSN) as a message or a log shows it: a password in it (``user:pw@``,
    ``password=``, a token in the query) replaced by ***."""
    value = _PASSWORD_RE.sub(r"\1***@", value.strip())
    return _SECRET_PARAM_RE.sub(r"\1***", value)


def resolve_embedding_host(
    embedding_host: str | None,
    chat_host: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The base URL that embeds: ``embedding_host``, else ``NAVI_EMBEDDING_HOST``, else the
    chat host (as :func:`resolve_host` finds it). The same precedence as the chat host's:
    the file first, then the environment."""
    env = os.environ if environ is None else environ
    raw = (embedding_host or "").strip()
    return resolve_host(raw, {}) if raw else env_embedding_host(env) or resolve_host(chat_host, env)


def env_embedding_host(environ: Mapping[str, str] | None = None) -> str | None:
    """The host ``NAVI_EMBEDDING_HOST`` names, or None when it is unset, empty or no host."""
    raw = env_host(EMBEDDING_HOST_ENV, os.environ if environ is None else environ)
    return resolve_host(raw, {}) if raw else None


def env_host(name: str, environ: Mapping[str, str]) -> str | None:
    """The host the variable ``name`` holds; None when it is unset, empty, or not a host
    (said by :func:`env_host_problems`: a value such as "http://[::1" failed every request
    as an internal error)."""
    raw = environ.get(name, "").strip()
    return raw if raw and valid_host(raw) is not None else None


_hidden: dict[str, str] = {}  # variables taken out of this process's environment


def hide_bad_env_hosts() -> None:
    """Take a host variable that holds no host out of this process's environment (kept for
    :func:`env_host_problems`): the ``ollama`` package reads OLLAMA_HOST when it is imported
    and raises on one such as "http://[::1"."""
    for name in ("OLLAMA_HOST", EMBEDDING_HOST_ENV):
        raw = os.environ.get(name, "").strip()
        if raw and env_host(name, os.environ) is None:
            _hidden[name] = os.environ.pop(name)


def env_host_problems(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line for each host variable that is set but holds no host: what is used instead
    and the fix."""
    env = {**os.environ, **_hidden} if environ is None else environ
    instead = {"OLLAMA_HOST": f"{DEFAULT_HOST} is used", EMBEDDING_HOST_ENV: "the chat host embeds"}
    problems = []
    for name, used in instead.items():
        raw = env.get(name, "").strip()
        if raw and env_host(name, env) is None:
            problems.append(
                f"{name}={shown_url(raw)!r} is not a host (http://name:port, https://name or"
                f" name:port, with no user or password): {used} instead; fix or unset it, then"
                " run `navi daemon stop`"
            )
    return problems


_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9_.-]*$")


def valid_host(value: object) -> str | None:
    """``value`` stripped when it is a host a setting may hold (``http(s)://name[:port][/path]``
    or ``name:port``), else None."""
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value.strip()):
        return None
    raw = value.strip()
    scheme, sep, rest = raw.partition("://")
    if not sep:
        scheme, rest = "http", raw
    if scheme not in {"http", "https"} or not rest:
        return None
    try:
        split = urllib.parse.urlsplit(f"{scheme}://{rest}")
        port = split.port  # ValueError when not a number or out of range
    except ValueError:
        return None
    name = split.hostname or ""
    if split.query or split.fragment or split.username or split.password:
        return None
    if not name and port is None:
        return None
    if port == 0 or not (_HOSTNAME_RE.match(name) or ":" in name):
        return None
    return raw


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
    raw = env_host("OLLAMA_HOST", os.environ if environ is None else environ)
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
