"""config.toml's problems, shown by every command as warning lines on stderr.

Checking the file means importing the settings model (~10-30 ms of a command's start-up), so
a command first compares the file's identity (inode, size, modification time) with the one
recorded the last time it was found clean (``<cache>/config-checked``): the same file is not
checked again. Only when it has problems is the running daemon asked for its own list, which
says the value it keeps in force: after a bad edit that is the last good value, not the
default.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from navi_desktop.cli.output import one_line

CHECKED = "config-checked"
_loaded: Any = None


def settings(paths: Any) -> Any:
    """The settings in config.toml (read again only when the file changed)."""
    global _loaded
    key = (paths.config_file, _identity(paths.config_file))
    if _loaded is None or _loaded[0] != key:
        from navi_desktop.config import load_settings

        _loaded = (key, *load_settings(paths.config_file))
    return _loaded[1]


def problems(paths: Any) -> list[str]:
    """config.toml's problems, each as one line (none for a clean file)."""
    settings(paths)
    return [str(e) for e in _loaded[2]]


def _identity(path: Path) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_ino} {st.st_size} {st.st_mtime_ns}\n"


def warn(paths: Any) -> None:
    """One warning line per problem of config.toml (the daemon's words when it runs)."""
    if not os.path.lexists(paths.config_file):
        return  # no file: the defaults, nothing to say
    identity = _identity(paths.config_file)  # None: unreadable, which the check says
    if identity is not None and _read(paths.cache / CHECKED) == identity:
        return
    errors = problems(paths)
    if not errors:
        if identity is not None:
            _remember(paths, identity)
        return
    from navi_desktop.config import capped

    for line in capped(_daemon_errors(paths) or errors):
        print(f"navi: warning: config.toml: {one_line(line)}", file=sys.stderr)


def register(commands: Any) -> None:
    c = commands.add_parser("config", help="check the settings file (config.toml)")
    c.set_defaults(help_parser=c)
    sub = c.add_subparsers(title="config commands", metavar="COMMAND")
    text = "list every problem of config.toml, with the value in force instead"
    p = sub.add_parser("check", help=text, description=text[0].upper() + text[1:] + ".")
    p.set_defaults(handler=cmd_check, help_parser=p, quiet_config=True)


def cmd_check(args: Any) -> int:
    """Every problem, one line each on stdout (the daemon's words when it runs); exit 2 when
    there is any, so a script can tell."""
    from navi_desktop.paths import Paths

    paths = Paths.from_env()
    errors = problems(paths)
    if not errors:
        print(f"{paths.config_file}: no problems")
        return 0
    for line in _daemon_errors(paths) or errors:
        print(one_line(line))
    return 2


def _daemon_errors(paths: Any) -> list[str] | None:
    from navi_desktop.daemon.client import call_sync
    from navi_desktop.daemon.main import socket_path
    from navi_desktop.errors import NaviError

    try:
        reply = call_sync(socket_path(paths), "settings.get", {}, timeout=1.0)
    except (NaviError, OSError):
        return None  # no daemon: what the file says is what will be in force
    errors = reply.get("errors") if isinstance(reply, dict) else None
    return [str(e) for e in errors] if isinstance(errors, list) else None


def _read(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, 128).decode("ascii", "replace")
    finally:
        os.close(fd)


def _remember(paths: Any, identity: str) -> None:
    """Record that this config.toml is clean (best effort: a miss only costs a check)."""
    from navi_desktop.fileio import write_private_atomic
    from navi_desktop.paths import ensure_private_dir

    try:
        ensure_private_dir(paths.cache)
        write_private_atomic(paths.cache / CHECKED, identity)
    except (OSError, ValueError):
        pass
