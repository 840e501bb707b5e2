"""A reply's tokens into its Markdown: at most one update a frame, and in parts, so that the
cost of a frame does not grow with the length of the reply.

Two costs made a long streamed reply stutter. Textual's ``MarkdownStream`` appends every
token that arrives while no append runs (at 200 tokens/s: about one Markdown update per
token, each a parse and a layout). And every layout re-measured every block of the reply's
one Markdown widget, because the widget's height (the size its blocks are measured in)
changes with each line. Here deltas wait for the next frame (``FRAME_S``), and once the live
Markdown holds ``PART_BLOCKS`` blocks its finished ones are sealed: they stay where they are,
the block being written moves into a new live part, and a sealed part, which never changes
again, answers its height from a cache. It looks the same as one Markdown widget: a part
ends only before a block with no top margin, so no margin is counted twice.

A layout of the screen is a frame's costliest step, so the paragraph being written asks for
one only when it gains a line, and after an update that made the reply taller the next
waits ``GROW_S``: lines come at most 15 times a second, the text within a line every frame.

This module imports Textual's Markdown: it is imported with the first message, not the app.
"""

from __future__ import annotations

import asyncio
import re
import weakref

from textual.containers import ScrollableContainer
from textual.geometry import Size
from textual.widget import Widget
from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownBlock

from navi_desktop.tui.garbage import full_collections
from navi_desktop.tui.widgets.growing import Growing

FRAME_S = 1 / 30  # deltas wait at most this long: one Markdown update a frame at 30 fps
GROW_S = 1 / 15  # after an update that made the reply taller (a layout), wait this long
PART_BLOCKS = 12  # blocks in the live part before its finished ones are sealed
# A reference definition ("[1]: https://…") may give a link in an earlier part its target:
# a reply with one is shown again in one piece when it ends.
REFERENCE = re.compile(r"^ {0,3}\[[^\]\n]+\]:", re.MULTILINE)


Paragraph = Markdown.BLOCKS["paragraph_open"]  # not exported by name


class LiveParagraph(Paragraph, Growing):
    """A paragraph that grows as tokens come. Most appends end on a line it already has: its
    text is drawn again, and the screen is laid out again only when it gains a line."""

    async def _update_from_block(self, block: MarkdownBlock) -> None:
        if not isinstance(block, Paragraph):
            await super()._update_from_block(block)
            return
        content, width = block._content, self.content_size.width
        same = bool(width) and content.get_height(self.styles, width) == self._content.get_height(
            self.styles, width
        )
        self._content = content
        self._copy_context(block)
        self.update(content, layout=not same)
        if not same and isinstance(part := self.parent, ReplyPart):
            part.grew = True


class ReplyPart(Markdown, Growing):
    """Part of a reply's Markdown. Sealed, it never changes again and knows its height;
    folded (far from the view), its blocks are out of the layout and it keeps that height."""

    BLOCKS = {**Markdown.BLOCKS, "paragraph_open": LiveParagraph}

    def __init__(self, markdown: str | None = None) -> None:
        super().__init__(markdown)
        self.sealed: str | None = None  # the text it shows, once sealed
        self.folded = False
        self.grew = False  # its last append made it taller
        # (width, blocks, height), once sealed: a part composed whole may be measured before
        # its blocks are all there
        self._height: tuple[int, int, int] | None = None

    @property
    def source(self) -> str:
        return super().source if self.sealed is None else self.sealed

    def seal(self, text: str) -> None:
        self.sealed = text

    def reopen(self) -> None:
        self.fold(False)
        self.sealed = self._height = None

    def fold(self, folded: bool) -> None:
        if folded == self.folded or (folded and self._height is None):
            return
        self.folded = folded
        for block in self.children:
            block.display = not folded

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.sealed is not None and self._height is not None:
            if self._height[:2] == (width, len(self.children)):
                return self._height[2]
            if self.folded:  # its blocks are needed to measure it: back next frame
                self.call_later(self.fold, False)
                return self._height[2]
        height = super().get_content_height(container, viewport, width)
        if self.sealed is not None:
            self._height = (width, len(self.children), height)
        return height


_WATCHED: weakref.WeakSet[Widget] = weakref.WeakSet()  # scrollers that refold on a scroll


def scroller_of(view: Widget) -> ScrollableContainer | None:
    """The transcript ``view`` scrolls in, watched so that a scroll unfolds what it shows."""
    scroller = next((a for a in view.ancestors if isinstance(a, ScrollableContainer)), None)
    if scroller is not None and scroller not in _WATCHED:
        _WATCHED.add(scroller)
        scroller.watch(scroller, "scroll_y", lambda _: fold_far(scroller), init=False)
    return scroller


def fold_far(scroller: Widget) -> None:
    """Fold the sealed parts more than half a screen away from what ``scroller`` shows, and
    unfold the others: a layout then costs about the same however long the transcript is."""
    height = scroller.size.height
    top, bottom = scroller.scroll_y - height // 2, scroller.scroll_y + height + height // 2
    for view in scroller.children:
        view_y = view.virtual_region.y
        for part in view.children:
            if isinstance(part, ReplyPart) and part.sealed is not None:
                region = part.virtual_region
                y = view_y + region.y
                part.fold(not (y < bottom and y + region.height > top))


class ReplyStream:
    """Writes a reply's deltas into ``live`` (in ``view``), sealing parts as it goes.

    ``write`` never waits: a task appends what came, once a frame. ``finish`` shows the final
    text: only the live part is parsed again when the text is what was streamed.
    """

    def __init__(self, view: Widget, live: ReplyPart) -> None:
        self.view = view
        self.scroller = scroller_of(view)
        self.live = live
        self.sealed: list[ReplyPart] = []  # the parts before the live one
        self.shown = ""  # the text the parts show, in order
        self.updates = 0  # Markdown updates made (appends and seals)
        self._pending: list[str] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._held = False  # full garbage collections held back (see FullCollections)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        full_collections.hold()
        self._held = True

    def _release(self) -> None:
        if self._held:
            self._held = False
            full_collections.release()

    def write(self, fragment: str) -> None:
        if fragment:
            self._pending.append(fragment)
            self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last, pause = -FRAME_S, FRAME_S
        while True:
            await self._wake.wait()
            if (wait := last + pause - loop.time()) > 0:
                await asyncio.sleep(wait)  # what comes meanwhile joins this update
            if self._closing:
                return
            self._wake.clear()
            chunk = "".join(self._pending)
            self._pending.clear()
            grew = await self._append(chunk)
            last, pause = loop.time(), GROW_S if grew else FRAME_S

    async def _append(self, chunk: str) -> bool:
        """Append ``chunk``; whether the reply grew taller (the screen was laid out again)."""
        live, blocks = self.live, len(self.live.children)
        live.grew = False
        await live.append(chunk)
        grew = live.grew or len(live.children) != blocks
        self.shown += chunk
        self.updates += 1
        if len(self.live.children) > PART_BLOCKS:
            await self._seal()
        if self.scroller is not None:
            fold_far(self.scroller)
        return grew

    async def _seal(self) -> None:
        """Seal every block of the live part but the last, which goes on in a new live part.
        (The sealed part stays where it is: moving its blocks would make them again.)"""
        live = self.live
        last = live.children[-1]
        if not isinstance(last, MarkdownBlock) or last.styles.margin.top:
            return  # a heading or a fence: its top margin would be counted twice
        start = last.source_range[0]
        lines = live.source.splitlines(keepends=True)
        head, tail = "".join(lines[:start]), "".join(lines[start:])
        self.live = ReplyPart()
        with self.view.app.batch_update():
            await last.remove()
            live.seal(head)
            await self.view.mount(self.live, after=live)
            # An append, not an update: it notes where the last block starts, so the next
            # append parses again from there (update notes only the last line).
            await self.live.append(tail)
        self.sealed.append(live)
        self.updates += 1
        full_collections.part_sealed()

    def cancel(self) -> None:
        """The reply's view is gone (the app quits): stop, and collect as usual again."""
        if self._task is not None:
            self._task.cancel()
        self._release()
        full_collections.settle()

    async def finish(self, text: str) -> None:
        """Stop, and show ``text`` (the reply as stored) for good. The hold on full garbage
        collections ends however this does: cut off (the app quits) or failing."""
        try:
            await self._finish(text)
        finally:
            self._release()

    async def _finish(self, text: str) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task  # an append under way completes
        streamed = self.shown + "".join(self._pending)
        self._pending.clear()
        live = self.live
        # Its last deltas may not have come yet (they reach the screen by another way than
        # the reply): the text then goes on from what was streamed.
        if text and text.startswith(streamed) and not (self.sealed and REFERENCE.search(text)):
            await live.update(live.source + text[len(self.shown) :])  # closes an open fence
            live.seal(live.source)
        else:  # not what was streamed (cut, failed, empty): one Markdown again
            for part in self.sealed:
                await part.remove()
            self.sealed = []
            await live.update(text or "*(no reply)*")
            live.seal(live.source)
        self.shown = text
        self.updates += 1
        if self.scroller is not None:
            fold_far(self.scroller)
