"""A widget that grows taller, or whose content does, keeps the lines it has drawn.

Textual draws a resized widget again whole, and a scrolling container whose content grew.
A streamed reply grows by a line many times a second, and with it the message, the reply's
Markdown and the transcript's content: each time, every line of all three on screen was
drawn again (a third of a frame's cost). None of those lines changes when the width stays
and the widget has no border and no padding at its bottom; lines it did not have yet are
drawn as usual, and the layout repaints the region it covers.

Nor does its new size call for a second layout: Textual lays the screen out again whenever a
widget's virtual size changes, though the layout that changed it has just placed every widget
at that size (a scrollbar that comes or goes asks for its own). For a streamed reply that
doubled the layouts, the costliest step of a frame.
"""

from __future__ import annotations

from textual.geometry import Region, Size
from textual.widget import Widget


class Growing(Widget):
    """Mix in after the widget's own class (Textual takes CSS from the first base only); only
    for widgets with no border and no padding at the bottom."""

    _growing = False  # a resize under way keeps the width and adds lines only

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        old = self.outer_size
        self._growing = bool(old) and size.width == old.width and size.height >= old.height
        try:
            return super()._size_updated(size, virtual_size, container_size, layout=False)
        finally:
            self._growing = False

    def _set_dirty(self, *regions: Region) -> None:
        if self._growing and not regions:
            return  # the lines drawn stay right
        super()._set_dirty(*regions)
