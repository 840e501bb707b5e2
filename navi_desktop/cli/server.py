"""``navi memory server start|stop|status``: a PostgreSQL memory server on this machine, to try
shared memory without a database administrator (pgserver: PostgreSQL 16 with pgvector in a
pip wheel). It listens on a Unix socket in Navi's data folder only; a household or team server
is a system PostgreSQL that ``[memory] dsn`` points at."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

from navi_desktop.cli.main import CommandError
from navi_desktop.cli.output import emit_json
from navi_desktop.cli.profile_access import wants_json

INSTALL = "python -m pip install 'navi-desktop[pgserver]'"


def register(command: Any) -> None:
    p = command(
        "server",
        cmd_server,
        "start, stop or show a PostgreSQL memory server on this machine (pgserver)",
    )
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument(
        "--use",
        action="store_true",
        help="with start: keep memory there from now on ([memory] backend and dsn in config.toml)",
    )


def _folder() -> Path:
    """Where the server keeps its files: in Navi's data folder. Run as root, pgserver runs
    PostgreSQL as a user of its own and opens every folder above the server's to others,
    which would open Navi's private folders: root's server lives in /var/lib instead, one per
    data folder."""
    import hashlib
    import os

    from navi_desktop.paths import Paths, ensure_own_dir

    paths = Paths.from_env()
    if os.geteuid() == 0:
        tag = hashlib.sha256(str(paths.data).encode()).hexdigest()[:12]
        root = Path("/var/lib/navi-desktop")
        root.mkdir(parents=True, exist_ok=True)
        return root / f"server-{tag}"
    ensure_own_dir(paths.data)
    return paths.data / "server"


def import_pgserver() -> Any:
    try:
        with warnings.catch_warnings():
            # pgserver asks platformdirs for a runtime folder at import; without
            # XDG_RUNTIME_DIR that warns, with a traceback-like line, on every command.
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError as exc:
        raise CommandError(f"the local memory server needs pgserver: {INSTALL}") from exc
    return pgserver


def cmd_server(args: argparse.Namespace) -> int:
    folder = _folder()
    if args.action == "start":
        server = import_pgserver().get_server(
            folder, cleanup_mode=None
        )  # keeps running after this command
        dsn = server.get_uri()
        if args.use:
            from navi_desktop.config_save import save_settings
            from navi_desktop.paths import Paths

            save_settings(
                Paths.from_env().config_file, {"memory.backend": "postgres", "memory.dsn": dsn}
            )
        _report(args, "running", dsn, folder, used=args.use)
        return 0
    if not (folder / "postmaster.pid").exists():
        _report(args, "stopped", None, folder)
        return 0 if args.action == "stop" else 1
    server = import_pgserver().get_server(
        folder, cleanup_mode="stop" if args.action == "stop" else None
    )
    dsn = server.get_uri()
    if args.action == "stop":
        server.cleanup()
        _report(args, "stopped", None, folder)
    else:
        _report(args, "running", dsn, folder)
    return 0


def _report(
    args: argparse.Namespace, state: str, dsn: str | None, folder: Path, *, used: bool = False
) -> None:
    if wants_json(args):
        emit_json({"state": state, "dsn": dsn, "folder": str(folder)})
        return
    if dsn is None:
        print(f"memory server stopped ({folder})")
        return
    print(f"memory server running: {dsn}")
    if used:
        print('Navi keeps memory there from now on ([memory] backend = "postgres").')
    else:
        print(
            f"to keep memory there: navi memory server start --use, or NAVI_PG_DSN='{dsn}'"
            ' with [memory] backend = "postgres"'
        )
