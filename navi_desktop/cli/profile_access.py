"""What every ``navi memory`` command shares: the profile it names, the store it opens (the
running daemon's, or the file itself), and how a memory is labelled in a listing."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from navi_desktop.cli.main import CommandError
from navi_desktop.errors import DiskFull, InvalidInput, NaviError, NotFound

if TYPE_CHECKING:
    from navi_desktop.memory import Memory, MemoryStore
    from navi_desktop.memory.embedders import Embedder

T = TypeVar("T")
BACKFILL_PER_RUN = 64


def wants_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def profile_name(args: argparse.Namespace) -> str:
    """--profile, else ``[memory] profile`` in config.toml, else the OS user name."""
    from navi_desktop.paths import Paths, check_profile_name

    name = getattr(args, "profile", None)
    if name is None:
        from navi_desktop.cli.config_check import settings

        name = settings(Paths.from_env()).memory.effective_profile()
    return check_profile_name(name)


def check_choice(name: str, value: str | None, allowed: tuple[str, ...]) -> None:
    """Reject a bad choice before the profile file is opened (or created)."""
    if value is not None and value not in allowed:
        raise InvalidInput(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


async def running_daemon(paths: Any) -> Any:
    """A client of the daemon, started when none answers; None when NAVI_DAEMON=off (scripts
    and tests that must not leave a background process), or when it cannot start (then the
    command works on the file directly, which SQLite's locking makes safe)."""
    from navi_desktop.daemon.main import connect

    if os.environ.get("NAVI_DAEMON", "on") == "off":
        return None
    try:
        client = await connect(paths, timeout=2.0)
    except NaviError as exc:
        print(f"navi: {exc}; using the memory file directly", file=sys.stderr)
        return None
    client.on_slow = lambda method: still_waiting(paths, client.slow_after)
    return client


def still_waiting(paths: Any, seconds: float) -> None:
    """Said once when the daemon takes long: a stopped one (SIGSTOP) left the command silent
    for as long as it stayed stopped."""
    from navi_desktop.daemon.main import lock_holder

    pid = lock_holder(paths)
    who = f"the daemon (pid {pid})" if pid else "the daemon"
    resume = f" or stopped (`kill -CONT {pid}` resumes it)" if pid else ""
    print(
        f"navi: still waiting for {who} after {seconds:.0f} s: it may be busy (a large"
        f" import){resume}; Ctrl+C stops waiting",
        file=sys.stderr,
        flush=True,
    )


def embedder_choice() -> str:
    choice = os.environ.get("NAVI_EMBEDDER", "auto")
    if choice not in ("auto", "local", "none"):
        raise InvalidInput(f"NAVI_EMBEDDER must be auto, local or none, got {choice!r}")
    return choice


def offline_embedder() -> Embedder | None:
    """The offline embedder when installed, unless NAVI_EMBEDDER=none."""
    from navi_desktop.memory.embedders import embedder_by_name

    return embedder_by_name(embedder_choice())


def with_store(
    args: argparse.Namespace,
    work: Callable[[MemoryStore], Awaitable[T]],
    *,
    unknown: str | None = None,
    reads: bool = False,
) -> T:
    """Open the profile's store, run ``work`` on it, always close it.

    A profile that has no file yet is not created by a look at it: work that only ``reads``
    sees an empty store (the daemon does the same), and work on something named in it (a
    memory's id, an entity) or on the file itself (compact) fails at once with ``unknown``,
    which says it is not there.
    """

    from navi_desktop.cli.config_check import settings
    from navi_desktop.daemon.files import scrub_logs
    from navi_desktop.fileio import nothing_at
    from navi_desktop.memory import MemoryStore
    from navi_desktop.memory.backends import on_server, open_server_store
    from navi_desktop.memory.db import DbError
    from navi_desktop.paths import Paths

    profile = profile_name(args)
    paths = Paths.from_env()
    path = paths.profile_db(profile)
    memory = settings(paths).memory
    server = on_server(memory)
    if unknown is not None and not server and nothing_at(path):
        raise NotFound(unknown)

    async def main() -> T:
        client = await running_daemon(paths)
        if client is not None:  # the daemon owns the file while it runs: ask it
            from navi_desktop.daemon.memory_api import RemoteMemory

            try:
                return await work(RemoteMemory(client, profile))  # type: ignore[arg-type]
            finally:
                await client.close()
        if server:  # the profile lives on a memory server
            opened = open_server_store(memory, profile, embedder=offline_embedder())
        elif reads and nothing_at(path):
            return await _on_empty_store(paths, profile, work)
        else:
            read_only = reads and not writable(path)
            opened = MemoryStore.open(path, embedder=offline_embedder(), read_only=read_only)
        async with await opened as store:
            # A forget on the file scrubs the daemon's logs too, as the daemon's own does.
            store.scrub_outside = partial(scrub_logs, paths.state)
            result = await work(store)
            # Keep new and edited memories findable by meaning; a few per run, so a large
            # profile never stalls a command (the daemon does the rest in the background).
            if not store.db.read_only:
                await store.backfill_embeddings(messages=False, limit=BACKFILL_PER_RUN)
            return result

    try:
        return asyncio.run(main())
    except DbError as exc:
        raise CommandError(f"{path}: {exc}") from exc
    except OSError as exc:
        where = exc.filename or path
        raise CommandError(f"cannot open {where}: {exc.strerror or exc}") from exc


def writable(path: Path) -> bool:
    """Whether the profile's file can be written: a look at one on a read-only disk (or one
    the user made read-only) reads it without writing, rather than being refused."""
    from navi_desktop.disk import on_read_only_fs

    return os.access(path, os.W_OK) and not on_read_only_fs(path)


async def _on_empty_store(
    paths: Any, profile: str, work: Callable[[MemoryStore], Awaitable[T]]
) -> T:
    """``work`` on an empty store of its own, in a private folder removed afterwards."""
    import errno
    import tempfile

    from navi_desktop.disk import free_bytes, megabytes
    from navi_desktop.memory import MemoryStore
    from navi_desktop.paths import ensure_own_dir

    embedder_choice()  # a bad setting is named whatever the profile; an empty store needs none
    run = ensure_own_dir(paths.runtime, "run folder")
    try:
        with tempfile.TemporaryDirectory(prefix="empty-profile-", dir=run) as folder:
            async with await MemoryStore.open(Path(folder) / "memory.db") as store:
                return await work(store)
    except (DiskFull, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno != errno.ENOSPC:
            raise
        # The scratch folder is ours, not the user's: name what they asked for and the fix.
        raise CommandError(
            f"disk full: {megabytes(free_bytes(run))} MB free in {run}; profile {profile!r}"
            " has no memory yet, and looking at it needs a little room there: free some space"
        ) from exc


def key_label(m: Memory) -> str:
    from navi_desktop.memory.textproc import normalize

    subject = m.subject if m.subject and normalize(m.subject) not in {"user", "i", "me"} else None
    if subject and m.key:
        return f"{subject}.{m.key}"
    return subject or m.key or "-"


def kind_label(m: Memory) -> str:
    return f"{m.kind}/{m.category}" if m.category else m.kind


def flags(m: Memory) -> str:
    flags = [m.status] + (["expired"] if m.expired() else []) + (["pinned"] if m.pinned else [])
    return ",".join(flags)


def text_of(m: Memory) -> str:
    from navi_desktop.memory.documents import memory_text

    return memory_text(m.to_dict())
