"""Typing while a reply streams must not cost the reply its frames: the whole reply reaches
the terminal, whenever the keys come. (A layout's render that fell inside a Markdown's batch
was discarded, and a reply stayed half drawn until the next layout: tui/frames.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from textual import events

from navi_desktop.tui.app import NaviApp
from tests.fake_ollama import Reply
from tests.tui_support import SIZE, until

REPLY = "(fake Ollama) You said: third try with typing"


class Drawn:
    """The text of every frame the app sends to the terminal."""

    def __init__(self, app: NaviApp) -> None:
        self.frames: list[str] = []
        display = app._display

        def drawn(on: Any, update: Any) -> None:
            if update is not None and not app._batch_count:  # else Textual drops it
                self.frames.append(update.render_segments(app.console))
            display(on, update)

        app._display = drawn  # type: ignore[method-assign]


def type_keys(app: NaviApp, *keys: str) -> None:
    """Keys as the terminal driver posts them (Pilot.press waits for the app to idle)."""
    for name in keys:
        app.post_message(events.Key(name, name if len(name) == 1 else None).set_sender(app))


@pytest.mark.parametrize("after", [0.0, 0.02, 0.05, 0.1, 0.2])
async def test_a_short_reply_is_drawn_whole_when_the_user_types_as_it_comes(fake, daemon, after):
    fake.script(Reply(REPLY, delay=0.01))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.status.memories is not None)
        drawn = Drawn(app)
        type_keys(app, *"third try", "enter")
        await asyncio.sleep(after)  # the reply takes ~0.1 s: keys before, during and after
        type_keys(app, *"abc")
        await until(pilot, lambda: app.screen.reply is None)
        for text in ("with typing", "abc"):
            await until(pilot, lambda text=text: any(text in frame for frame in drawn.frames))
