"""Stopping signals while a copy of the user's memories is written under a temporary name:
the process stops only once that file is gone, whichever thread writes it."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

# What stops a command at a terminal or from a service manager; SIGKILL cannot be caught.
_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# Temporary files being written now, by any thread (``removed_on_stop``). Changed and copied
# under the GIL alone: the handler that removes them may run while the main thread changes it.
_BEING_WRITTEN: set[str] = set()
_CLEANER: list[bool] = []  # set once remove_temporaries_on_stop has run


@contextlib.contextmanager
def removed_on_stop(*paths: str | os.PathLike[str]) -> Iterator[None]:
    """``paths``, temporary files written inside, are removed by SIGTERM or SIGHUP before
    the process stops, whichever thread writes them (``remove_temporaries_on_stop``)."""
    names = {os.fspath(path) for path in paths}
    _BEING_WRITTEN.update(names)
    try:
        yield
    finally:
        _BEING_WRITTEN.difference_update(names)


def remove_temporaries_on_stop() -> None:
    """Once, on the main thread (a program's start): SIGTERM and SIGHUP, where they would
    stop the process at once, first remove the temporary files being written
    (``removed_on_stop``), then stop it as before. Only the main thread runs a signal
    handler, so a writer in another thread (a restore, a backup, the app's export) had its
    copy of the memories left behind for the next cleaner. A handler set elsewhere, or a
    signal ignored (``nohup``), is left as it is."""
    if _CLEANER or threading.current_thread() is not threading.main_thread():
        return
    _CLEANER.append(True)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _remove_and_stop)


def _remove_and_stop(signum: int, frame: FrameType | None) -> None:
    for name in list(_BEING_WRITTEN):
        with contextlib.suppress(OSError):
            os.unlink(name)
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


class _Stopped(BaseException):
    """A stopping signal, raised where the code was, so that its cleanup runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Inside, SIGINT, SIGTERM and SIGHUP raise ``_Stopped`` (the writer's ``except
    BaseException`` or ``finally``, inside too, removes what was half-written); after it,
    the signal is delivered again to the handler there was, so the process stops as it
    would have (inside another such block, that one's handler: it raises there in turn). A
    signal ignored (``nohup``) stays ignored. Off the main thread (the app's export, a
    restore, the daemon's backups) the main thread's handler removes what ``writing_in``
    was given (``remove_temporaries_on_stop``); SIGKILL's rule holds for the rest."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)
        if len(caught) == 1:  # a second one must not break off the first one's cleanup
            raise _Stopped(signum)

    before = {sig: signal.getsignal(sig) for sig in _STOPS}
    for sig, handler in before.items():
        if handler not in (signal.SIG_IGN, None):
            signal.signal(sig, stop)
    try:
        yield
    except _Stopped:
        pass
    finally:
        for sig, handler in before.items():
            if handler not in (signal.SIG_IGN, None):
                signal.signal(sig, handler)
    if caught:
        signal.raise_signal(caught[0])
