"""Typing goes first: what a key changes is drawn ahead of a streamed reply's frames.

While a reply streams, most frames are a layout of the screen and a render of what moved,
12-35 ms together in one turn of the event loop. Textual draws a key's change with the next
frame, so a letter typed meanwhile waited for the frame under way, then for the next one
(its layout included): 27-31 ms to be seen at the median, 68-77 ms at p99 (benchmarks/
tui_perf.py). Two changes:

- A layout's render runs a few turns of the loop after it (``INPUT_TURNS``), not in the same
  turn: a key that came meanwhile is handled between the two halves, not after both.
- A text field a key changed is drawn on the next turn (``draw_soon``), into the arrangement
  the screen already has, unless a layout is pending that could move or resize it.

Both use Textual's screen internals (``_refresh_layout``, ``_compositor_refresh``,
``_layout_widgets``); the tests in ``tests/test_tui_frames.py`` pin what they rely on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from textual.geometry import Size
from textual.screen import Screen
from textual.widget import Widget

# Turns of the event loop between a layout and its render. A key from the terminal takes
# three to reach a text field (the driver's call into the loop, the app, the field).
INPUT_TURNS = 4


def after_turns(turns: int, callback: Callable[[], None]) -> None:
    """Run ``callback`` after ``turns`` turns of the running loop: behind whatever is ready
    to run now and what that schedules in turn."""
    loop = asyncio.get_running_loop()

    def step(left: int) -> None:
        if left:
            loop.call_soon(step, left - 1)
        else:
            callback()

    step(turns)


class InputFirst(Screen[None]):
    _arranging = False  # inside Textual's layout, which renders at its end
    _render_due = False  # a layout's render waits for its turn
    _typed: set[Widget] | None = None  # fields to draw on the next turn

    def _refresh_layout(self, size: Size | None = None, scroll: bool = False) -> None:
        self._arranging = True
        try:
            super()._refresh_layout(size, scroll)
        finally:
            self._arranging = False

    def _compositor_refresh(self) -> None:
        if not self._arranging:
            super()._compositor_refresh()
        elif not self._render_due:
            self._render_due = True
            after_turns(INPUT_TURNS, self._render_layout)

    def _render_layout(self) -> None:
        if self.app._batch_count:
            # Textual discards what is drawn inside a batch (a Markdown mounting blocks), and
            # the layout's changes would be lost with it: drawn once the batch is over.
            after_turns(INPUT_TURNS, self._render_layout)
            return
        self._render_due = False
        if self.is_running:
            # Widgets changed since the layout (a key) are drawn with it where they stay.
            self._draw(self._dirty_widgets - self._may_move())

    def draw_soon(self, widget: Widget) -> None:
        """Draw ``widget``, whose content a key just changed, on the next turn of the loop
        rather than with the next frame."""
        if self._typed is None:
            self._typed = set()
            asyncio.get_running_loop().call_soon(self._draw_typed)
        self._typed.add(widget)

    def _draw_typed(self) -> None:
        typed, self._typed = self._typed or set(), None
        if not (self.is_current and self.is_running) or self.app._batch_count:
            return  # the next frame draws them (a batch would drop this one)
        moving, shown = self._may_move(), self._compositor.visible_widgets
        still = {
            w for w in typed if w in shown and w not in moving and moving.isdisjoint(w.ancestors)
        }
        if not still:
            return
        # Only the typed fields now: the rest of a layout's changes are drawn in their turn
        # (_render_layout), so the key is seen without waiting for them.
        later = self._compositor._dirty_regions
        self._compositor._dirty_regions = set() if self._render_due else later
        self._draw(still)
        if self._render_due:
            self._compositor._dirty_regions |= later

    def _may_move(self) -> set[Widget]:
        """Widgets a pending layout may move or resize (and their containers)."""
        moving: set[Widget] = {w for w in self._layout_widgets if isinstance(w, Widget)}
        for widgets in self._layout_widgets.values():
            moving |= widgets
        return moving

    def _draw(self, widgets: set[Widget]) -> None:
        """Render ``widgets`` and what the last layout changed; other widgets marked for
        drawing stay marked for the next frame (Textual's render clears every mark)."""
        kept = self._dirty_widgets - widgets
        self._compositor.update_widgets(widgets)
        super()._compositor_refresh()
        self._dirty_widgets |= kept
