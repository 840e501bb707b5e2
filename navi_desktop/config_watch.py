"""Live settings: watch the config folder and apply edits made by any editor.

Editors save by writing a temp file and renaming it over ``config.toml``; a watch on the file
itself sees that once, so the folder is watched and events are filtered to the file's name.
An invalid edit is reported (``SettingError`` with key and reason) and the previous good value
stays in force. ``watchfiles`` is imported when the watcher starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from navi_desktop.config import SettingError, Settings, changed_keys, load_settings
from navi_desktop.paths import ensure_private_dir

log = logging.getLogger(__name__)

OnChange = Callable[[Settings, list[SettingError], set[str]], Awaitable[None] | None]

# ~25 ms from save to reload (see notes/platform.md); step is how often the watch thread wakes.
DEBOUNCE_MS = 200
STEP_MS = 20
_MISSING_RECHECK_S = 0.1  # a file briefly absent mid-save is not a reset to defaults
_RETRY_S = 1.0


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class SettingsWatcher:
    """Reload ``path`` when it changes and call ``on_change(settings, errors, changed_keys)``
    when the settings or the error list differ from the last ones reported.

    ``await start()`` loads the file (unless ``settings`` is given) and returns once the folder
    is watched; ``await stop()`` ends the task promptly. ``settings`` / ``errors`` are the
    values in force.
    """

    def __init__(
        self,
        path: Path,
        on_change: OnChange,
        *,
        settings: Settings | None = None,
        errors: list[SettingError] | None = None,
        debounce_ms: int = DEBOUNCE_MS,
        step_ms: int = STEP_MS,
    ) -> None:
        self.path = Path(path)
        self._on_change = on_change
        self._settings = settings
        self._errors = list(errors or [])
        self._debounce_ms = debounce_ms
        self._step_ms = step_ms
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._signature: tuple[int, int, int] | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings, self._errors = load_settings(self.path)
        return self._settings

    @property
    def errors(self) -> list[SettingError]:
        return list(self._errors)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        if self.running:
            return
        ensure_private_dir(self.path.parent)
        if self._settings is None:
            self._signature = _signature(self.path)
            self._settings, self._errors = load_settings(self.path)
        self._stop = asyncio.Event()
        ready = asyncio.Event()
        self._task = asyncio.create_task(self._run(ready), name=f"settings-watch {self.path}")
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self._task.done():  # failed before watching: surface the reason
            self._task.result()

    async def stop(self, timeout: float = 2.0) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    async def reload(self) -> set[str]:
        """Re-read the file now; report and return the changed keys (empty when nothing did)."""
        previous = self.settings
        new, errors = load_settings(self.path, previous=previous)
        if not self.path.exists():
            await asyncio.sleep(_MISSING_RECHECK_S)
            if self.path.exists():
                new, errors = load_settings(self.path, previous=previous)
        self._signature = _signature(self.path)
        changed = changed_keys(previous, new)
        if not changed and errors == self._errors:
            return set()
        self._settings, self._errors = new, errors
        try:
            result = self._on_change(new, list(errors), set(changed))
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("settings on_change callback failed")
        return changed

    def _watched(self) -> tuple[list[str], set[str], set[str]]:
        """The folders to watch, the paths of interest in them, and the folders among those
        paths: the file's folder, its parent (so that a folder removed and made again is
        seen, and the watch armed again on the new one), and a dotfiles link's target
        folder. Only folders there now can be watched."""
        folder = self.path.parent.absolute()
        paths = {str(self.path.absolute()), str(folder)}
        folders = {str(folder), str(folder.parent)}
        if self.path.is_symlink():  # a dotfiles link: its target's folder changes too
            target = Path(os.path.realpath(self.path))  # never raises, even for a loop
            paths |= {str(target), str(target.parent)}
            folders.add(str(target.parent))
        there = sorted(f for f in folders if os.path.isdir(f))
        return there, paths, folders - {str(folder.parent)}

    async def _run(self, ready: asyncio.Event) -> None:
        import watchfiles

        while not self._stop.is_set():
            there, paths, rearm = self._watched()

            def wanted(_change: watchfiles.Change, name: str, paths: set[str] = paths) -> bool:
                return name in paths

            changes = watchfiles.awatch(
                *there,
                watch_filter=wanted,
                debounce=self._debounce_ms,
                step=self._step_ms,
                stop_event=self._stop,
                recursive=False,
            )
            pending: asyncio.Future[set[tuple[watchfiles.Change, str]]] | None = None
            try:
                if not there:
                    raise FileNotFoundError(f"no folder of {self.path} exists")
                # The generator's first step sets up the OS watch, then waits in a thread.
                pending = asyncio.ensure_future(anext(changes))
                await asyncio.sleep(0)
                ready.set()
                if _signature(self.path) != self._signature:  # changed while we set up
                    await self.reload()
                while True:
                    try:
                        batch = await pending
                    except StopAsyncIteration:
                        return
                    await self.reload()
                    if any(name in rearm for _change, name in batch):
                        break  # a folder removed or made again: watch the one there now
                    pending = asyncio.ensure_future(anext(changes))
            except asyncio.CancelledError:
                self._stop.set()
                raise
            except Exception as err:  # the folder vanished, a watch limit was hit, ...
                log.warning("watching %s failed (%s); retrying", self.path.parent, err)
                ready.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), _RETRY_S)
            finally:
                if pending is not None and not pending.done():
                    pending.cancel()
                    with contextlib.suppress(BaseException):
                        await pending
                with contextlib.suppress(Exception):
                    await changes.aclose()
