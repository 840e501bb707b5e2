"""Python's full garbage collections kept off the screen's time.

A full collection walks every object the app holds, and the screen freezes while it does:
after a 5,000-token reply that took ~320 ms on a 2-core machine. Two things keep it short:

- None runs while a reply streams (drawing it makes cyclic garbage fast enough for one about
  every second); one runs soon after the reply ends.
- While the app runs, what is there when a reply starts, what survives the collection after
  it, and what survives the next young collection after each part of the reply is sealed, is
  frozen (``gc.freeze``): full collections walk only what came since, so the one after a
  reply walks what its last part made (~15–30 ms after 5,000 tokens, against ~250 ms for all
  of it), not the transcript and all that Textual built to start.

Cyclic garbage among frozen objects (a transcript replaced, rows rebuilt, the lines of a part
that folds away) is not collected until a thorough collection, which thaws everything and
walks it again: at most every ``THOROUGH_S`` (a 5,000-token reply leaves ~65,000 such objects
for it), once the user has pressed no key for ``IDLE_S`` and no reply streams. Nothing here
imports Textual.
"""

from __future__ import annotations

import asyncio
import gc
import time

AFTER_REPLY_S = 1.0  # the full collection held back during a reply runs this long after
MAX_HOLD_S = 120.0  # replies that follow each other closely still get a full collection
THOROUGH_S = 300.0  # at most this long between collections that walk frozen objects too
IDLE_S = 5.0  # a thorough collection waits until this long passes without a key or a reply


class FullCollections:
    def __init__(self) -> None:
        self.streams = 0
        self.freezing = False  # between start and stop: the app runs
        self._threshold: tuple[int, int, int] | None = None  # Python's, while held
        self._since = 0.0  # the last full collection, while held
        self._thorough = 0.0  # the last thorough collection, while freezing
        self._freeze_next = False  # a part was sealed: freeze after the next young collection
        self.active_at = 0.0  # the user's last key or click
        self._idle_timer: asyncio.TimerHandle | None = None  # a thorough collection is due

    # -- the app's lifetime --------------------------------------------------------------------

    def start(self) -> None:
        """The app is up: what it imported and built to start lives as long as it does."""
        gc.freeze()
        self.freezing = True
        self._thorough = time.monotonic()
        if self._collected not in gc.callbacks:
            gc.callbacks.append(self._collected)

    def stop(self) -> None:
        """The app is gone: everything is Python's to collect again (a process, such as a test
        run, may start another app), on Python's own schedule even if a reply was cut off
        before it released its hold."""
        self.streams = 0
        self.settle()
        self.freezing = False
        self._freeze_next = False
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._collected in gc.callbacks:
            gc.callbacks.remove(self._collected)
        gc.unfreeze()

    def touch(self) -> None:
        """The user pressed a key or used the mouse: not the moment for a thorough collection."""
        self.active_at = time.monotonic()

    def collect(self) -> None:
        """A full collection now, its survivors frozen while the app runs. When a thorough one
        is due, it waits for the user to pause (it walks the whole app: ~0.5-0.8 s)."""
        gc.collect()
        if not self.freezing:
            return
        gc.freeze()
        if time.monotonic() - self._thorough >= THOROUGH_S and self._idle_timer is None:
            self._idle_timer = asyncio.get_running_loop().call_later(IDLE_S, self._when_idle)

    def _when_idle(self) -> None:
        self._idle_timer = None
        if not self.freezing:
            return
        quiet = time.monotonic() - self.active_at
        if self.streams or quiet < IDLE_S:
            wait = IDLE_S if self.streams else IDLE_S - quiet
            self._idle_timer = asyncio.get_running_loop().call_later(wait, self._when_idle)
            return
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._thorough = time.monotonic()

    # -- replies -------------------------------------------------------------------------------

    def hold(self) -> None:
        """A reply starts streaming: no full collection until it ends."""
        now = time.monotonic()
        if self._threshold is None:
            if self.freezing:  # what is there now (screens, rows, the transcript) mostly stays
                gc.freeze()
            self._threshold = gc.get_threshold()
            young, middle, _ = self._threshold
            gc.set_threshold(young, middle, 2**31 - 1)
            self._since = now
        elif now - self._since > MAX_HOLD_S:  # no pause between replies for long: before this one
            self.collect()
            self._since = now
        self.streams += 1

    def part_sealed(self) -> None:
        """A part of the streaming reply will not change again: what survives Python's next
        collection of the young generations is frozen, so the collection after the reply does
        not walk it. (At its end, not by a collection of our own: that took up to 5 ms.)"""
        if self.freezing and self._threshold is not None:
            self._freeze_next = True

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        """Python's collection callback: after a young collection, freeze if a part asked."""
        if phase == "stop" and info["generation"] >= 1 and self._freeze_next:
            self._freeze_next = False
            if self._threshold is not None:  # the reply still streams
                gc.freeze()

    def release(self) -> None:
        """A reply ended: collect once the user reads it (a full collection now would be a
        stutter at its last frame), then let Python collect as usual."""
        self.streams = max(0, self.streams - 1)
        if self.streams == 0:
            asyncio.get_running_loop().call_later(AFTER_REPLY_S, self.settle, True)

    def settle(self, collect: bool = False) -> None:
        """Python's own schedule again, unless a reply streams."""
        if self.streams == 0 and self._threshold is not None:
            if collect:
                self.collect()
            gc.set_threshold(*self._threshold)
            self._threshold = None


full_collections = FullCollections()
