"""The daemon process: one per OS user. A lock stops a second one; a socket left by a crash
is replaced; SIGTERM, SIGINT and ``daemon.stop`` end every open session before exiting."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navi_desktop.daemon.files import lock_log_writes, remove_stale_spools, trim_log
from navi_desktop.daemon.open_profiles import close_idle
from navi_desktop.daemon.place import PLACE_CHECK_S, DaemonRunning, Lock, holder, keep_place
from navi_desktop.disk import on_read_only_fs
from navi_desktop.errors import NaviError
from navi_desktop.paths import Paths, ensure_own_dir

if TYPE_CHECKING:
    from navi_desktop.daemon.client import DaemonClient

log = logging.getLogger("navi.daemon")
MAINTENANCE_EVERY_S = 6 * 3600
OLLAMA_CHECK_S = 30.0
RETRY_CHECK_S = 60.0
ALREADY_RUNNING = 75  # the exit status of a daemon refused by the lock (EX_TEMPFAIL)


def socket_path(paths: Paths) -> Path:
    return paths.runtime / "daemon.sock"


def lock_path(paths: Paths) -> Path:
    return paths.runtime / "daemon.lock"


def lock_holder(paths: Paths) -> int | None:
    """The running daemon's pid, as the lock file says (place.holder)."""
    return holder(lock_path(paths))


def call_when_back(paths: Paths, method: str, params: dict[str, Any], timeout: float) -> Any:
    """``call_sync`` to the daemon. One that runs but whose socket was removed listens again
    within a second (place.py): it is waited for, not reported as not running."""
    from navi_desktop.daemon.client import DaemonUnavailable, call_sync

    deadline = time.monotonic() + 2 * PLACE_CHECK_S
    while True:
        try:
            return call_sync(socket_path(paths), method, params, timeout=timeout)
        except DaemonUnavailable:
            if time.monotonic() > deadline or lock_holder(paths) is None:
                raise
            time.sleep(0.1)


async def serve(
    paths: Paths, *, ready: asyncio.Event | None = None, stop: asyncio.Event | None = None
) -> None:
    """Run the daemon until ``stop`` is set (a signal, see :func:`run_foreground`) or
    ``daemon.stop`` is called."""
    from navi_desktop.config import load_settings
    from navi_desktop.config_watch import SettingsWatcher
    from navi_desktop.daemon import method_params as mp
    from navi_desktop.daemon.params import require_models, takes
    from navi_desktop.daemon.rpc import RpcServer
    from navi_desktop.daemon.service import Service

    lock = Lock(lock_path(paths))
    config_file = paths.config_file
    settings, errors = load_settings(config_file)
    for error in errors:
        log.warning("config: %s", error)
    sock = socket_path(paths)  # a stale one of ours is replaced when the server starts
    stop = stop or asyncio.Event()
    server = RpcServer(sock, {})
    service = Service(paths, settings, server.broadcast)
    service.config_errors = [str(e) for e in errors]  # in daemon.status: every client shows them

    @takes(mp.NoParams)
    async def daemon_stop(params: mp.NoParams, peer: Any) -> dict[str, Any]:
        stop.set()
        return {"stopping": True}

    @takes(mp.NoParams)
    async def settings_get(params: mp.NoParams, peer: Any) -> dict[str, Any]:
        from navi_desktop.ollama_host import env_embedding_host, resolve_host

        return {
            "settings": service.settings.to_dict(),
            "errors": service.config_errors,
            # What an unset host means here: OLLAMA_HOST is the daemon's, not the app's.
            # An unset embedding host: NAVI_EMBEDDING_HOST's, or None for the chat host.
            "unset": {
                "ollama.host": resolve_host(None),
                "ollama.embedding_host": env_embedding_host(),
            },
        }

    @takes(mp.SettingsSet)
    async def settings_set(params: mp.SettingsSet, peer: Any) -> dict[str, Any]:
        """Save changes ({dotted key: value}) to config.toml, keeping its comments; the
        watcher then applies and broadcasts them like an edit made in any editor."""
        from navi_desktop.config_save import save_settings

        await asyncio.to_thread(save_settings, config_file, params.changes)
        await watcher.reload()
        return {"settings": service.settings.to_dict()}

    async def on_settings(new: Any, errs: list[Any], changed: set[str]) -> None:
        service.apply_settings(new)
        service.config_errors = [str(e) for e in errs]
        await server.broadcast(
            "settings",
            "settings.changed",
            {
                "settings": new.to_dict(),
                "changed": sorted(changed),
                "errors": service.config_errors,
            },
        )

    handlers = service.handlers() | {
        "daemon.stop": daemon_stop,
        "settings.get": settings_get,
        "settings.set": settings_set,
    }
    for name, handler in require_models(handlers).items():
        server.register(name, handler)
    watcher = SettingsWatcher(config_file, on_settings, settings=settings, errors=errors)
    remove_stale_spools(paths.runtime)  # before clients can start an import
    await server.start()
    await watcher.start()
    await service.recover()
    maintenance = asyncio.ensure_future(_maintain(service))
    monitor = asyncio.ensure_future(_watch_ollama(service, server.broadcast))
    place = asyncio.ensure_future(keep_place(lock, server, stop))
    log.info("navi daemon %d listening on %s", os.getpid(), sock)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        log.info("stopping: ending open sessions")
        maintenance.cancel()
        monitor.cancel()
        place.cancel()
        await watcher.stop()
        await service.shutdown()
        await server.stop()  # removes the socket if it is still the one it bound
        lock.release()


async def _watch_ollama(service: Any, broadcast: Any, every_s: float = OLLAMA_CHECK_S) -> None:
    """Tell subscribers when Ollama comes up or goes away (the TUI's banner)."""
    from navi_desktop.daemon.ollama_api import health_result

    last: tuple[bool, str | None] | None = None
    while True:
        health = await service.ollama_health()
        state = (health.reachable, health.error)
        if state != last:
            last = state
            await broadcast("ollama", "ollama.state", health_result(health))
        await asyncio.sleep(every_s)


async def _maintain(service: Any) -> None:
    from navi_desktop.daemon.background import PoliteModel
    from navi_desktop.pipeline.maintenance import run_maintenance

    last = time.monotonic()
    untrimmed = ""  # why the log was not trimmed, said once
    while True:
        await asyncio.sleep(RETRY_CHECK_S)
        try:
            await close_idle(service)
        except Exception:
            log.exception("closing idle profiles failed")
        try:
            trim_log(service.paths.daemon_log)
            untrimmed = ""
        except (NaviError, OSError) as exc:  # a file planted at <log>.1: said, and left
            if str(exc) != untrimmed:
                log.warning("the log was not trimmed: %s", exc)
            untrimmed = str(exc)
        try:
            await service.retry_due()  # failed session ends, on their backoff schedule
        except Exception:
            log.exception("retrying pending sessions failed")
        if time.monotonic() - last < MAINTENANCE_EVERY_S:
            continue
        last = time.monotonic()
        for profile in service.profiles:
            try:
                # Work nobody asked for: it waits for a quiet user and gives way to chat turns.
                model = PoliteModel(service.backend(), service.gate, quiet=True)
                report = await run_maintenance(
                    await service.store(profile), model, service.end_settings
                )
                if report.archived or report.reflections or report.entity_links:
                    # An open inspector shows what expired, decayed or was added.
                    await service.broadcast(
                        "memory", "memory.changed", {"profile": profile, "method": "maintenance"}
                    )
            except Exception:  # one profile's failure must not stop the daemon's jobs
                log.exception("maintenance failed for %s", profile)


def start_logging() -> None:
    """The daemon's log is its stderr, written line by line under the log's lock, which a
    scrub or a trim takes to rewrite it."""
    lock_log_writes()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    # A crash in C code (a signal, not an exception) leaves its cause and where it happened
    # in the log (the daemon's stderr), not a silent disappearance.
    faulthandler.enable()
    # A line per HTTP request to Ollama: most of the log, none of it news (errors are ours).
    logging.getLogger("httpx").setLevel(logging.WARNING)


def run_foreground(paths: Paths) -> int:
    """The daemon process itself (``navi daemon run``): SIGTERM and SIGINT stop it cleanly."""
    ensure_own_dir(paths.state, "state folder")
    start_logging()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(paths, stop=stop)

    try:
        asyncio.run(main())
    except DaemonRunning as exc:  # said apart, for a client starting one (start_background)
        print(f"navi: {exc}", file=sys.stderr)
        return ALREADY_RUNNING
    return 0


async def connect(
    paths: Paths,
    *,
    timeout: float = 5.0,
    autostart: bool = True,
    on_start: Callable[[], None] | None = None,
) -> DaemonClient:
    """A client of the user's daemon, which is started first when none answers (and
    ``autostart``); ``on_start`` hears that it is being started."""
    from navi_desktop.daemon.client import DaemonClient, DaemonUnavailable

    try:
        return await DaemonClient.connect(socket_path(paths), timeout=timeout)
    except DaemonUnavailable:
        if not autostart:
            raise
    if on_start is not None:
        on_start()
    await asyncio.to_thread(start_background, paths)
    return await DaemonClient.connect(socket_path(paths), timeout=timeout)


def start_background(paths: Paths, timeout: float = 15.0) -> int:
    """Start the daemon detached and return its pid once it answers. Its folders and log are
    checked here first, so a refusal reaches the user as one line, not only the log."""
    from navi_desktop.daemon.client import DaemonUnavailable, call_sync
    from navi_desktop.daemon.files import open_private_file

    for folder in (paths.state, paths.runtime):
        if on_read_only_fs(folder):
            raise NaviError(
                f"the daemon cannot start: {folder} is on a read-only file system, and it keeps"
                " its log and socket there: mount it read-write again"
            )
    ensure_own_dir(paths.state, "state folder")
    ensure_own_dir(paths.runtime, "run folder")
    log_file = paths.daemon_log
    with contextlib.suppress(NaviError, OSError):  # a log not trimmed must not stop a start
        trim_log(log_file)
    fd = open_private_file(log_file, os.O_WRONLY | os.O_APPEND)
    try:
        start = os.fstat(fd).st_size
        proc = subprocess.Popen(
            [sys.executable, "-m", "navi_desktop", "daemon", "run"],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            env=os.environ.copy(),
        )
    finally:
        os.close(fd)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Refused by the lock: one runs, whose socket was removed; it listens again within
        # a second (place.py), so the ping below goes on until the deadline.
        if proc.poll() is not None and proc.returncode != ALREADY_RUNNING:
            why = _last_error(log_file, start)
            raise NaviError(
                f"the daemon could not start: {why}"
                if why
                else f"the daemon exited at start (code {proc.returncode}); see {log_file}"
            )
        try:
            call_sync(socket_path(paths), "rpc.ping", {}, timeout=1.0)
            # The one that answered holds the lock: with starts racing, this child may be
            # one about to find the lock taken and exit, so its pid is not the daemon's.
            return lock_holder(paths) or proc.pid
        except DaemonUnavailable:
            time.sleep(0.05)
    if proc.poll() == ALREADY_RUNNING:  # and it never listened again
        raise NaviError(f"the daemon could not start: {_last_error(log_file, start)}")
    raise NaviError(f"the daemon did not answer within {timeout:.0f} s; see {log_file}")


def _last_error(log_file: Path, start: int) -> str | None:
    """The one-line error a daemon that failed at start wrote to its log (after ``start``)."""
    from navi_desktop.daemon.files import open_private_file

    try:
        fd = open_private_file(log_file, os.O_RDONLY)
    except NaviError:
        return None
    with os.fdopen(fd, "rb") as f:
        f.seek(start)
        tail = f.read(64 * 1024).decode("utf-8", "replace")
    # A warning (a config.toml problem) is no reason to stop: before, a crash was blamed on one.
    errors = [
        line[len("navi: ") :]
        for line in tail.splitlines()
        if line.startswith("navi: ") and not line.startswith("navi: warning: ")
    ]
    return errors[-1] if errors else None
