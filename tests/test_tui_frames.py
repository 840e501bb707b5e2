"""Typing goes first (tui/frames.py): a layout's render waits for a key that came meanwhile,
and a key's change is drawn before the next frame unless a pending layout may move it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from textual.app import App, ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Label, Static

from navi_desktop.tui.chat.prompt import Prompt
from navi_desktop.tui.frames import InputFirst
from tests.tui_support import record_frames, type_keys, until


class Typing(InputFirst):
    """A growing log above a prompt, as the chat has them. ``held``: Textual makes no frames
    (its update timer's work is skipped), so only what draws ahead of them shows."""

    held = False

    def _on_timer_update(self) -> None:
        if not self.held:
            super()._on_timer_update()

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("a line", id="log")
        with Vertical(id="bottom"):
            yield Prompt()

    def on_mount(self) -> None:
        prompt = self.query_one(Prompt)
        prompt.cursor_blink = False  # the test's frames are the keys' own
        prompt.focus()


class TypingApp(App[None]):
    CSS = "#bottom { height: auto; }"

    def on_mount(self) -> None:
        self.push_screen(Typing())


class Frames:
    """What the screen does, in order: layouts (start and end) and the frames it draws, each
    with the text on screen in it."""

    def __init__(self, app: App[Any], screen: Typing) -> None:
        self.seen: list[tuple[str, str]] = []
        layout = screen._refresh_layout
        record_frames(app, lambda text: self.seen.append(("drawn", text)))

        def laid_out(*args: Any, **kwargs: Any) -> None:
            self.seen.append(("layout", "start"))
            layout(*args, **kwargs)
            self.seen.append(("layout", "end"))

        screen._refresh_layout = laid_out  # type: ignore[method-assign]

    def drew(self, text: str) -> bool:
        return any(kind == "drawn" and text in what for kind, what in self.seen)


@asynccontextmanager
async def held() -> AsyncIterator[tuple[Any, Typing, Frames]]:
    """The app with its frames recorded and Textual's own frames held."""
    app = TypingApp()
    async with app.run_test(size=(60, 16)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, Typing)
        frames = Frames(app, screen)
        screen.held = True
        yield pilot, screen, frames


async def test_a_layouts_render_waits_for_a_key_that_came_meanwhile():
    async with held() as (pilot, screen, frames):
        screen.query_one("#log", Static).update("a line\nand another")  # something to draw
        await pilot.pause()
        type_keys(pilot.app, *"q")  # typed while a frame is being made
        screen._refresh_layout()
        await until(pilot, lambda: frames.drew("q"))
        # Textual renders at the end of a layout, before the key: nothing is drawn inside it,
        # and the first frame after it has the key.
        assert frames.seen[:2] == [("layout", "start"), ("layout", "end")]
        assert "q" in frames.seen[2][1]
        assert frames.drew("and another")  # the layout's own changes, in their turn


async def test_a_key_is_drawn_before_the_next_frame_that_lays_out_something_else():
    async with held() as (pilot, screen, frames):
        screen.query_one("#log", Static).update("a line\nand another")  # asks for a layout
        type_keys(pilot.app, *"zq")
        await until(pilot, lambda: frames.drew("zq"))
        assert screen.query_one(Prompt).text == "zq"
        assert ("layout", "start") not in frames.seen


async def test_a_key_waits_for_the_frame_when_a_pending_layout_may_move_its_field():
    async with held() as (pilot, screen, frames):
        # A line above the prompt, in its own container: the prompt moves down a line.
        await screen.query_one("#bottom").mount(Label("note"), before=0)
        type_keys(pilot.app, *"zq")
        await until(pilot, lambda: screen.query_one(Prompt).text == "zq")
        await pilot.pause(0.1)
        assert not frames.drew("zq"), "drawn where the prompt was before the layout moves it"
        screen.held = False  # the next frame lays it out and draws it
        await until(pilot, lambda: frames.drew("zq"))
        assert frames.seen.index(("layout", "start")) < frames.seen.index(("layout", "end"))


async def test_a_layouts_render_that_falls_in_a_batch_is_drawn_after_it():
    """Textual discards a frame drawn inside a batch (a Markdown mounting its blocks). The
    layout's render, put off a few turns, must not fall there and lose the layout's changes:
    a reply whose user typed as it ended stayed half drawn until the next layout."""
    async with held() as (pilot, screen, frames):
        screen.query_one("#log", Static).update("a line\nand another")
        await pilot.pause()
        screen._refresh_layout()  # its render waits a few turns...
        pilot.app._begin_batch()  # ...and a batch begins meanwhile
        await pilot.pause(0.05)  # many turns of the loop: the render's turn comes and goes
        assert not frames.drew("and another")
        pilot.app._end_batch()
        await until(pilot, lambda: frames.drew("and another"))
