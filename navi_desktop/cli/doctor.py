"""``navi memory doctor``, ``backup`` and ``restore``: a profile's file checked, copied and
given back.

The doctor and backups read the file themselves, read-only, whether or not the daemon runs
(SQLite lets them read beside its writes; the doctor must work while the daemon holds the
profile in an error state). A restore replaces the file, so a running daemon does it: it
closes the profile, swaps the file and opens it again.

Exit codes: doctor 0 healthy (warnings and notes allowed), 1 something is wrong; backup and
restore 0 done, 1 not done for want of space or disk, 2 bad input (no such file, a backup
that fails its checks).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from navi_desktop.cli.output import emit_json, human_size, one_line
from navi_desktop.cli.profile_access import profile_name, wants_json
from navi_desktop.errors import InvalidInput

Command = Callable[..., argparse.ArgumentParser]
LEVELS = {"ok": "ok", "note": "note", "warning": "WARNING", "problem": "PROBLEM"}


def register(command: Command) -> None:
    """Add the commands to ``navi memory`` (``command`` is its helper: name, handler, help)."""
    p = command(
        "doctor",
        cmd_doctor,
        "check the profile's file (integrity, full-text index, schema, vectors, log, backups)",
    )
    p.add_argument("--file", metavar="FILE", help="check this file instead (a backup, a copy)")
    p.add_argument(
        "--recover",
        action="store_true",
        help="write what can be read from a damaged file into a new file beside it",
    )

    p = command("backup", cmd_backup, "copy the profile's file into a private backup file")
    p.add_argument(
        "--to", metavar="FILE", help="a new file (or a folder) instead of the profile's backups"
    )

    p = command("restore", cmd_restore, "replace the profile's file with a backup")
    p.add_argument("file", metavar="FILE", help="a backup, or a file the doctor recovered")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")


def _db_path(args: argparse.Namespace) -> Path:
    """The profile's file; a profile kept on a memory server has none to check or copy."""
    from navi_desktop.cli.config_check import settings
    from navi_desktop.memory.backends import on_server
    from navi_desktop.paths import Paths

    paths = Paths.from_env()
    memory = settings(paths).memory
    if on_server(memory):
        raise InvalidInput(
            "memory is kept on a memory server ([memory] backend = 'postgres'), not in a file:"
            " the server's own tools check and back it up (pg_dump, pg_basebackup); `navi"
            " memory migrate --to sqlite` makes a file of a profile"
        )
    return paths.profile_db(profile_name(args))


# -- doctor ------------------------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    from navi_desktop.memory.doctor import examine

    path = Path(args.file) if args.file else _db_path(args)
    report = examine(path)
    if args.recover:
        return _recover(args, report)
    if wants_json(args):
        emit_json(report.to_dict())
        return 0 if report.ok else 1
    print(f"Checking {path}")
    for f in report.findings:
        print(f"  {LEVELS[f.level]:<8} {f.check:<16} {one_line(f.text)}")
        if f.fix and f.level != "ok":
            print(f"  {'':<8} {'':<16} -> {one_line(f.fix)}")
    advice = report.advice()
    if report.ok:
        print("No problems found.")
    elif advice:
        print("What to do:")
        for line in advice:
            print(f"  - {one_line(line)}")
    return 0 if report.ok else 1


def _recover(args: argparse.Namespace, report: Any) -> int:
    from navi_desktop.memory.salvage import recover
    from navi_desktop.paths import profile_option

    if not report.damaged:
        if wants_json(args):
            emit_json({"recovered": None, "report": report.to_dict()})
        else:
            print(f"{report.path} is not damaged: nothing to recover.", end=" ")
            backup = f"navi memory backup{profile_option(report.path)}"
            print(f"Copy it with `{backup}` if you want one.")
        return 0 if report.ok else 1
    result = asyncio.run(recover(report.path))
    if wants_json(args):
        emit_json({"recovered": result.to_dict(), "report": report.to_dict()})
        return 0
    copied = ", ".join(f"{n} {table}" for table, n in result.copied.items() if n)
    print(f"Recovered into {result.target}: {copied or 'nothing'}.")
    if result.unreadable:
        lost = ", ".join(f"{table} ({n})" for table, n in result.unreadable.items())
        print(f"Damaged pages stopped the reading of: {lost}; the rows on them are lost.")
    if result.dropped:
        print(f"{result.dropped} rows that referred to lost rows were left out.")
    print(f"{report.path} was not changed. Check the new file, then use it:")
    print(f"  navi memory doctor --file {result.target}")
    print(f"  navi memory restore {result.target}{profile_option(report.path)}")
    return 0


# -- backup ------------------------------------------------------------------------------------


def cmd_backup(args: argparse.Namespace) -> int:
    from navi_desktop.memory.backup import is_file, make_backup

    if args.to == "":  # not "the default place": a script's empty variable, said as such
        raise InvalidInput(
            "the backup's path is empty (--to ''): give a file or folder, or leave --to out"
            " for the profile's backups folder"
        )
    path = _db_path(args)
    if not is_file(path):  # a folder on the way the user cannot search is said, with the fix
        raise InvalidInput(f"no memory file at {path}: nothing to back up")
    target = Path(args.to).expanduser() if args.to else None
    result = make_backup(path, target)
    if wants_json(args):
        emit_json(result.to_dict())
    else:
        print(
            f"Backed up {path} to {result.path}"
            f" ({human_size(result.bytes)}, {result.seconds:.2f} s)."
        )
    return 0


# -- restore -----------------------------------------------------------------------------------


def cmd_restore(args: argparse.Namespace) -> int:
    from navi_desktop.memory.restore import check_backup

    backup = Path(args.file).expanduser().absolute()
    path = _db_path(args)
    memories = check_backup(backup)  # before asking: a bad backup never gets that far
    if not args.yes:
        if not sys.stdin.isatty():
            raise InvalidInput(
                "restore asks for confirmation and stdin is not a terminal: pass --yes"
            )
        print(
            f"Replace {path} with {backup} ({memories} memories)? The current file is kept"
            " beside it. [y/N] ",
            end="",
            file=sys.stderr,
            flush=True,
        )
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("Nothing restored.")
            return 1
    result = asyncio.run(_restore(path, backup))
    if wants_json(args):
        emit_json(result)
        return 0
    print(f"Restored {result['path']} from {backup} ({result['memories']} memories).")
    again, redacted = result.get("forgotten_again") or 0, result.get("redacted_again") or 0
    if again or redacted:  # what the backup held that was forgotten after it was made
        print(
            f"Forgotten again: {again} {'memory' if again == 1 else 'memories'} and"
            f" {redacted} {'message' if redacted == 1 else 'messages'} forgotten since the backup."
        )
    if result.get("side_copy"):
        print(f"The file it replaced is kept as {result['side_copy']}.")
    if result.get("not_compared"):
        print(f"navi: {result['not_compared']}", file=sys.stderr)
    return 0


async def _restore(path: Path, backup: Path) -> dict[str, Any]:
    """Through the daemon when it runs (it holds the file open); else on the file."""
    if os.environ.get("NAVI_DAEMON", "on") != "off":
        from navi_desktop.daemon.client import DaemonUnavailable
        from navi_desktop.daemon.main import connect
        from navi_desktop.paths import Paths

        try:
            client = await connect(Paths.from_env(), timeout=2.0, autostart=False)
        except DaemonUnavailable:
            client = None
        if client is not None:
            async with client:
                params = {"file": str(backup), "profile": path.parent.name}
                return await client.call("profile.restore", params, timeout=600.0)
    from navi_desktop.memory.restore import restore_file

    return (await asyncio.to_thread(restore_file, backup, path)).to_dict()
