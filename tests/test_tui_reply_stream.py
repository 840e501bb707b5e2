"""A streamed reply's deltas into its Markdown: batched per frame, in sealed parts, never lost
or reordered, and looking exactly like the same text shown whole."""

from __future__ import annotations

import asyncio
import gc

import pytest
from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Markdown

from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.chat.messages import MessageView
from navi_desktop.tui.garbage import full_collections
from tests.fake_ollama import Reply
from tests.tui_support import SIZE, tracked, until


def long_reply(words: int) -> list[str]:
    """Deltas as a model sends them: words, a paragraph every 25, a list and a code fence."""
    chunks = [f"word{i % 97} " for i in range(words)]
    chunks[::25] = [c.rstrip() + ".\n\n" for c in chunks[::25]]
    chunks[words // 3 : words // 3] = ["## A heading\n\n", "- one\n", "- two\n\n"]
    chunks[words // 2 : words // 2] = ["```python\n", "print(1)\n", "```\n\n", "Then "]
    return chunks


def shown(view: MessageView) -> str:
    """The Markdown text on screen in a message (a long reply is in parts)."""
    return "".join(part.source for part in view.query(Markdown))


def parts(monkeypatch, blocks: int) -> None:
    """Seal a reply's parts after ``blocks`` blocks: many parts from a short reply."""
    monkeypatch.setattr("navi_desktop.tui.chat.stream.PART_BLOCKS", blocks)


class Transcript(App[None]):
    """One message in a transcript as tall as the whole reply, so all of it is drawn."""

    def __init__(self, view: MessageView) -> None:
        super().__init__()
        self.view = view

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield self.view


class Counted:
    """Counts the Markdown updates (appends and whole updates) made by every widget."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        for name in ("append", "update"):
            method = getattr(Markdown, name)
            monkeypatch.setattr(Markdown, name, self._counting(method))

    def _counting(self, method):
        def counted(widget, *args, **kwargs):
            self.calls += 1
            return method(widget, *args, **kwargs)

        return counted


async def test_a_burst_of_deltas_is_one_update_with_the_exact_text(monkeypatch):
    chunks = long_reply(1000)
    view = MessageView("assistant")
    async with Transcript(view).run_test(size=(80, 40)) as pilot:
        await view.begin_stream()
        updates = Counted(monkeypatch)
        for chunk in chunks:  # all of them before the app gets to run again
            await view.write(chunk)
        await pilot.pause(0.1)  # a few frames
        assert shown(view) == "".join(chunks)  # everything is on screen before the end
        await view.finish("".join(chunks))
        assert view.text == shown(view) == "".join(chunks)
    # One append (and a seal) for 1,000 deltas; Textual's MarkdownStream made hundreds.
    assert updates.calls <= 5, updates.calls


async def test_a_long_reply_streams_in_parts_that_look_like_one_markdown(monkeypatch):
    parts(monkeypatch, 4)
    chunks = long_reply(300)
    text = "".join(chunks)
    streamed = MessageView("assistant")
    size = (80, 260)  # tall enough for all of it
    async with Transcript(streamed).run_test(size=size) as pilot:
        await streamed.begin_stream()
        sent = ""
        for n, chunk in enumerate(chunks, 1):
            await streamed.write(chunk)
            sent += chunk
            await pilot.pause(0.002)  # a few deltas a frame, as a model sends them
            if n % 10 == 0:  # shown before more comes: a loaded machine joined it all in one
                await until(pilot, lambda sent=sent: shown(streamed) == sent)
        await until(pilot, lambda: shown(streamed) == text)  # a loaded machine lags behind
        assert len(streamed.query(Markdown)) > 2  # sealed parts, and the live one
        await streamed.finish(text)
        await pilot.pause()
        assert streamed.text == shown(streamed) == text
        assert all(part.source for part in streamed.query(Markdown))  # none empty
        streamed_screen = pilot.app.export_screenshot()
    whole = MessageView("assistant", text)
    async with Transcript(whole).run_test(size=size) as pilot:
        await pilot.pause()
        assert len(whole.query(Markdown)) == 1
        assert pilot.app.export_screenshot() == streamed_screen


async def test_a_reply_that_ends_other_than_it_streamed_shows_the_final_text(monkeypatch):
    parts(monkeypatch, 2)
    view = MessageView("assistant")
    async with Transcript(view).run_test(size=(80, 40)) as pilot:
        await view.begin_stream()
        for n in range(12):
            await view.write(f"Paragraph {n}.\n\n")
            await pilot.pause(0.05)
        assert len(view.query(Markdown)) > 1
        await view.finish("Cut short.")
        assert view.text == shown(view) == "Cut short."
        assert len(view.query(Markdown)) == 1


async def test_a_reply_that_ends_before_its_last_deltas_are_shown_keeps_its_parts(monkeypatch):
    """The reply's end can overtake its last deltas (they come by another way): the parts
    stay, and the live one shows the rest."""
    parts(monkeypatch, 2)
    view = MessageView("assistant")
    async with Transcript(view).run_test(size=(80, 40)) as pilot:
        await view.begin_stream()
        for n in range(12):
            await view.write(f"Paragraph {n}.\n\n")
            await pilot.pause(0.05)
        await until(pilot, lambda: shown(view) == view.text)  # every part made before counting,
        await pilot.pause()  # its last seal's mount included
        count = len(view.query(Markdown))
        text = view.text + "The end, not streamed yet."
        await view.finish(text)
        assert view.text == shown(view) == text
        assert len(view.query(Markdown)) == count > 1


async def test_parts_far_from_the_view_fold_and_unfold_when_scrolled_to(monkeypatch):
    """Parts more than half a screen away leave the layout; the transcript looks the same as
    the reply shown whole, at its end and scrolled back to its start."""
    from navi_desktop.tui.chat.stream import ReplyPart

    parts(monkeypatch, 4)
    chunks = long_reply(600)
    text = "".join(chunks)
    size = (80, 24)
    streamed = MessageView("assistant")
    async with Transcript(streamed).run_test(size=size) as pilot:
        scroller = pilot.app.query_one(VerticalScroll)
        scroller.anchor()  # follows the reply, as the chat does
        await streamed.begin_stream()
        for chunk in chunks:
            await streamed.write(chunk)
            await pilot.pause(0.002)
        await streamed.finish(text)
        await pilot.pause(0.1)
        folded = [part for part in streamed.query(ReplyPart) if part.folded]
        assert folded and not any(block.display for part in folded for block in part.children)
        at_end = pilot.app.export_screenshot()
        scroller.scroll_home(animate=False)
        await pilot.pause(0.1)
        assert not streamed.query(ReplyPart).first().folded
        at_start = pilot.app.export_screenshot()
        assert shown(streamed) == text
    whole = MessageView("assistant", text)
    async with Transcript(whole).run_test(size=size) as pilot:
        scroller = pilot.app.query_one(VerticalScroll)
        await pilot.pause()
        scroller.scroll_end(animate=False)
        await pilot.pause(0.1)
        assert pilot.app.export_screenshot() == at_end
        scroller.scroll_home(animate=False)
        await pilot.pause(0.1)
        assert pilot.app.export_screenshot() == at_start


async def test_full_garbage_collections_wait_for_the_end_of_a_reply(monkeypatch):
    """A full collection walks every object the app holds (a frozen UI): none while a reply
    streams, one soon after it ends, then Python's own schedule again."""
    monkeypatch.setattr("navi_desktop.tui.garbage.AFTER_REPLY_S", 0.05)
    threshold = gc.get_threshold()
    view = MessageView("assistant")
    async with Transcript(view).run_test(size=(80, 20)) as pilot:
        await view.begin_stream()
        assert gc.get_threshold()[:2] == threshold[:2]
        assert gc.get_threshold()[2] > 1_000_000  # held back
        await view.write("Hello.")
        full = gc.get_stats()[2]["collections"]
        await view.finish("Hello.")
        # Waited for, not paused for: a loaded machine may run the collection late.
        await until(pilot, lambda: gc.get_threshold() == threshold)
        assert gc.get_stats()[2]["collections"] > full


async def test_sealed_parts_are_frozen_while_the_reply_streams(monkeypatch):
    """The collection after a long reply walks only what its last part made."""
    parts(monkeypatch, 2)
    view = MessageView("assistant")
    async with Transcript(view).run_test(size=(80, 40)) as pilot:
        full_collections.start()  # as NaviApp does when it mounts
        try:
            await view.begin_stream()
            for chunk in long_reply(200):
                await view.write(chunk)
                await pilot.pause(0.002)
            await pilot.pause(0.1)
            stream = view._stream
            assert stream is not None and len(stream.sealed) > 1
            made = stream.sealed[-1]  # the first part was made before the reply began
            gc.collect(1)  # Python's own young collections come as it allocates
            assert not tracked(made)  # frozen: no full walk
            await view.finish("".join(long_reply(200)))
        finally:
            full_collections.stop()


async def test_replies_back_to_back_still_get_a_full_collection(monkeypatch):
    """Held back too long (the next reply came before the collection after the last one):
    the next reply collects before it starts."""
    monkeypatch.setattr("navi_desktop.tui.garbage.AFTER_REPLY_S", 60.0)
    monkeypatch.setattr("navi_desktop.tui.garbage.MAX_HOLD_S", 0.0)
    first, second = MessageView("assistant"), MessageView("assistant")
    async with Transcript(first).run_test(size=(80, 20)) as pilot:
        await first.begin_stream()
        await first.finish("One.")
        full = gc.get_stats()[2]["collections"]
        await pilot.app.query_one(VerticalScroll).mount(second)
        await second.begin_stream()
        assert gc.get_stats()[2]["collections"] > full
        await second.finish("Two.")


async def test_a_long_reply_through_the_daemon_arrives_whole(fake, daemon, monkeypatch):
    """The real path: the fake Ollama streams, the daemon forwards each delta, and what the
    app shows is at every moment the start of the reply (nothing lost, nothing out of order),
    then all of it, as stored."""
    parts(monkeypatch, 4)
    chunks = long_reply(600)
    text = "".join(chunks)
    fake.script(Reply(chunks=chunks, delay=0.002))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.status.memories is not None)
        seen: list[tuple[str, str]] = []

        # Sampled inside the app: pilot.press returns once the process idles (up to 2 s), and
        # a fast machine has streamed the whole reply by then.
        def look() -> None:
            views = list(app.screen.query(MessageView))
            if len(views) == 2 and app.screen.reply is not None:
                seen.append((views[-1].text, shown(views[-1])))

        app.set_interval(0.02, look)
        await pilot.press(*"write a lot", "enter")
        reply = None

        def finished() -> bool:
            nonlocal reply
            views = list(app.screen.query(MessageView))
            reply = views[-1] if len(views) == 2 else None
            return reply is not None and app.screen.reply is None and bool(reply.text)

        await until(pilot, finished, timeout=30)
        assert reply is not None
        # The last delta reaches the screen with the next frame's append (stream.py), which a
        # loaded machine can run after the reply's end is seen: wait for it, lose nothing.
        await until(pilot, lambda: shown(reply) == reply.text)
        assert reply.text == shown(reply) == text
        assert len(seen) > 3
        assert all(text.startswith(got) and text.startswith(on_screen) for got, on_screen in seen)
        session_id = app.screen.session_id
    stored = await daemon.call("sessions.show", {"id": session_id})
    assert stored["messages"][-1]["content"] == text


async def test_key_checks_after_a_long_reply_look_at_messages_not_their_blocks(
    fake, daemon, monkeypatch
):
    """The footer asks the chat which keys apply (regenerate, copy, rate: is there a last
    reply?) at every refresh. Answering by a query of the transcript's descendants matched
    every block of every reply on screen, each time: ~200 ms after a few long replies."""
    import textual.css.query as query_module

    parts(monkeypatch, 4)
    text = "".join(long_reply(3000))
    fake.script(Reply(text))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=(100, 200)) as pilot:  # tall: many blocks stay unfolded
        await until(pilot, lambda: app.status.memories is not None)
        await pilot.press(*"write a lot", "enter")
        await until(pilot, lambda: app.screen.reply is None and len(app.screen._views()) == 2)
        transcript = app.screen.transcript
        widgets = len(list(transcript.walk_children()))
        matched = 0
        real_match = query_module.match

        def counting(selectors, node):
            nonlocal matched
            matched += 1
            return real_match(selectors, node)

        monkeypatch.setattr(query_module, "match", counting)
        list(transcript.query(MessageView))
        assert matched >= widgets > 50  # the count sees a query of every descendant
        matched = 0
        bindings = app.screen.active_bindings
        assert any(b.binding.action == "regenerate" and b.enabled for b in bindings.values())
        assert matched < widgets // 4


def drawn(app: App) -> list[str]:
    """The screen's lines as drawn."""
    return [strip.text.rstrip() for strip in app.screen._compositor.render_strips()]


class Layouts:
    """Counts the screen's layouts (Textual lays the whole screen out: a frame's costliest
    step while a reply streams)."""

    def __init__(self, monkeypatch) -> None:
        from textual.screen import Screen

        self.count = 0
        layout = Screen._refresh_layout

        def counted(screen, *args, **kwargs):
            self.count += 1
            return layout(screen, *args, **kwargs)

        monkeypatch.setattr(Screen, "_refresh_layout", counted)


async def test_an_append_within_a_line_is_drawn_without_a_layout(monkeypatch):
    """Most deltas end on a line the paragraph already has: its text is drawn again, the
    screen is not laid out again. A delta that adds a line is laid out, once (not again for
    each widget that grew), and the reply looks as it would shown whole."""
    monkeypatch.setattr("navi_desktop.tui.chat.stream.GROW_S", 0.0)
    view = MessageView("assistant")
    screens = []
    async with Transcript(view).run_test(size=(80, 20)) as pilot:
        await view.begin_stream()
        await view.write("First paragraph.\n\nHello")
        await until(pilot, lambda: shown(view).endswith("Hello"))
        await pilot.pause()  # its layouts done, however slow the machine
        layouts = Layouts(monkeypatch)
        await view.write(" there, world")
        await until(pilot, lambda: shown(view).endswith("world"))
        await pilot.pause()  # a layout asked for would be made here
        assert shown(view) == "First paragraph.\n\nHello there, world"
        screens.append((shown(view), drawn(pilot.app)))
        assert layouts.count == 0
        await view.write(" and on" * 12)  # a second line
        await until(pilot, lambda: shown(view).endswith("and on"))
        await pilot.pause()
        assert layouts.count == 1
        screens.append((shown(view), drawn(pilot.app)))
        await view.finish(shown(view))
    for text, streamed in screens:
        whole = MessageView("assistant", text)
        async with Transcript(whole).run_test(size=(80, 20)) as pilot:
            await pilot.pause()
            assert drawn(pilot.app) == streamed


async def test_after_a_delta_that_added_lines_the_next_waits_longer(monkeypatch):
    """Lines come at most every GROW_S (a layout each); the text within a line every frame."""
    monkeypatch.setattr("navi_desktop.tui.chat.stream.GROW_S", 3.0)
    view = MessageView("assistant")
    async with Transcript(view).run_test(size=(80, 20)) as pilot:
        await view.begin_stream()
        await view.write("Hello")  # its paragraph is new: a layout
        await until(pilot, lambda: shown(view) == "Hello")
        await view.write(" there")  # waits for GROW_S
        await pilot.pause(0.5)
        assert shown(view) == "Hello"
        await until(pilot, lambda: shown(view) == "Hello there", timeout=5)
        await view.write(" again")  # on the same line: the next frame
        await until(pilot, lambda: shown(view) == "Hello there again", timeout=1.5)
        await view.finish("Hello there again, and the end.")
        assert shown(view) == view.text == "Hello there again, and the end."


async def test_a_finish_cut_off_still_ends_the_hold_on_full_collections():
    """The app quitting (or a failure) in the middle of a reply's finish must not leave full
    garbage collections held back for the rest of the app's life."""
    view = MessageView("assistant")
    async with Transcript(view).run_test(size=(80, 20)) as pilot:
        await view.begin_stream()
        await view.write("Hello.")
        assert full_collections.streams == 1
        finishing = asyncio.create_task(view.finish("Hello."))
        await asyncio.sleep(0)  # it waits for the stream's last append
        finishing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await finishing
        assert full_collections.streams == 0
        await pilot.pause()


async def test_the_app_gone_gives_python_its_own_collections_back():
    """A reply cut off before it released its hold (the app quit as it ended): once the app
    stops, Python's thresholds are its own again, for whatever the process does next."""
    threshold = gc.get_threshold()
    full_collections.start()
    full_collections.hold()
    assert gc.get_threshold()[2] > 1_000_000
    full_collections.stop()
    assert gc.get_threshold() == threshold
    assert full_collections.streams == 0
