"""``navi memory migrate --to postgres|sqlite``: copy a profile between this machine's memory
file and the memory server ([memory] dsn / NAVI_PG_DSN), whole (memory/copy_profile.py). The
source is left as it is; the user switches ``[memory] backend`` when ready."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from navi_desktop.cli.main import CommandError
from navi_desktop.cli.output import emit_json, nuls_note
from navi_desktop.cli.profile_access import profile_name, wants_json
from navi_desktop.errors import DiskFull, StorageUnavailable

BACKENDS = ("postgres", "sqlite")


def register(command: Any) -> None:
    p = command(
        "migrate",
        cmd_migrate,
        "copy this profile between the memory file and the memory server ([memory] dsn)",
    )
    p.add_argument(
        "--to",
        required=True,
        choices=BACKENDS,
        help="postgres: the file into the server; sqlite: the server's profile into the file",
    )


def cmd_migrate(args: argparse.Namespace) -> int:
    from navi_desktop.cli.config_check import settings
    from navi_desktop.paths import Paths

    profile = profile_name(args)
    paths = Paths.from_env()
    memory = settings(paths).memory
    if not memory.effective_dsn():
        raise CommandError(
            f"--to {args.to} needs the memory server: set [memory] dsn in config.toml or"
            " NAVI_PG_DSN to its address (postgresql://user@host/navi); `navi memory server"
            " start` runs one on this machine and prints it"
        )
    path = paths.profile_db(profile)
    if args.to == "postgres" and not path.exists():
        raise CommandError(f"profile {profile!r} has no memory file to copy ({path})")
    with _daemon_stopped(paths):
        try:
            report = asyncio.run(_copy(args.to, memory, path, profile))
        except _database_errors() as exc:  # the target's transaction was rolled back
            raise CommandError(f"the copy failed and nothing of it was kept: {exc}") from exc
        except DiskFull as exc:  # not the file's advice: nothing retries a copy
            raise DiskFull(
                f"{exc.without_advice()}; nothing of the copy was kept: free some space,"
                " then migrate again"
            ) from exc
    _show(args, report, profile, paths.config_file)
    return 0


def _database_errors() -> tuple[type[BaseException], ...]:
    from navi_desktop.memory.db import DbError

    try:
        import asyncpg
    except ImportError:
        return (DbError,)
    return (DbError, asyncpg.PostgresError, asyncpg.InterfaceError)


@contextlib.contextmanager
def _daemon_stopped(paths: Any) -> Iterator[None]:
    """Refuse while the daemon runs (it owns the file and writes as it pleases), and hold its
    lock for the copy's length, so that none starts meanwhile."""
    import fcntl

    from navi_desktop.daemon.files import open_private_file
    from navi_desktop.daemon.main import lock_path
    from navi_desktop.paths import ensure_own_dir

    ensure_own_dir(paths.runtime, "run folder")
    fd = open_private_file(lock_path(paths), os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            raise CommandError(
                f"the Navi daemon is running (pid {holder}) and owns the memory: stop it with"
                " `navi daemon stop`, then migrate again"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())  # who holds it, for a daemon that is refused
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


async def _copy(to: str, memory: Any, path: Path, profile: str) -> Any:
    from navi_desktop.memory.backends import open_server_store
    from navi_desktop.memory.store import MemoryStore

    def server() -> Any:
        return open_server_store(memory, profile, embedder=None, create=to == "postgres")

    if to == "postgres":
        # The source is opened first: a missing one creates nothing on the other side.
        async with await MemoryStore.open(path, create=False) as source, await server() as target:
            return await _copy_whole(source, target)
    if path.is_symlink():  # SQLite would write wherever it points
        raise CommandError(
            f"{path} is a symbolic link, not a memory file: remove it, then migrate again"
        )
    async with await server() as source:
        new_folder, new_file = not path.parent.exists(), not path.exists()
        try:
            async with await MemoryStore.open(path) as target:
                return await _copy_whole(source, target)
        except BaseException:
            # The copy's transaction was rolled back; a file made for it goes too.
            if new_file:
                _remove_new(path, new_folder)
            raise


async def _copy_whole(source: Any, target: Any) -> Any:
    from navi_desktop.memory.copy_profile import copy_profile

    try:
        return await copy_profile(source, target)
    except StorageUnavailable as exc:  # the server went away mid-copy: no retrying here
        raise StorageUnavailable(
            f"{exc.without_advice()}; nothing of the copy was kept:"
            " migrate again once the server answers"
        ) from exc


def _remove_new(path: Path, folder_too: bool) -> None:
    for leftover in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm", "-journal"))):
        with contextlib.suppress(OSError):
            leftover.unlink()
    if folder_too:
        with contextlib.suppress(OSError):
            path.parent.rmdir()


def _show(args: argparse.Namespace, report: Any, profile: str, config: Any) -> None:
    setting = f'[memory] backend = "{args.to}"'
    if wants_json(args):
        emit_json(
            {**report.to_dict(), "profile": profile, "setting": setting, "config": str(config)}
        )
        return
    print(f"Copied profile {profile!r} from {report.source} to {report.target}:")
    for table, n in report.counts.items():
        if n:
            print(f"  {table.replace('_', ' ')}: {n}")
    for why, n in report.left_out.items():
        print(f"  left out: {n} {why}")
    if report.nuls_replaced:
        print(f" {nuls_note(report.nuls_replaced)}".rstrip())
    print(f"To use it, set {setting} in {config}; the source was left as it was.")
