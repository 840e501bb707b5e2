"""Typing while a reply streams must not cost the reply its frames: the whole reply reaches
the terminal, whenever the keys come. (A layout's render that fell inside a Markdown's batch
was discarded, and a reply stayed half drawn until the next layout: tui/frames.py.)"""

from __future__ import annotations

import asyncio

import pytest

from navi_desktop.tui.app import NaviApp
from tests.fake_ollama import Reply
from tests.tui_support import SIZE, record_frames, type_keys, until

REPLY = "(fake Ollama) You said: third try with typing"


@pytest.mark.parametrize("after", [0.0, 0.02, 0.05, 0.1, 0.2])
async def test_a_short_reply_is_drawn_whole_when_the_user_types_as_it_comes(fake, daemon, after):
    fake.script(Reply(REPLY, delay=0.01))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.status.memories is not None)
        frames: list[str] = []
        record_frames(app, frames.append)
        type_keys(app, *"third try", "enter")
        await asyncio.sleep(after)  # the reply takes ~0.1 s: keys before, during and after
        type_keys(app, *"abc")
        await until(pilot, lambda: app.screen.reply is None)
        for text in ("with typing", "abc"):
            await until(pilot, lambda text=text: any(text in frame for frame in frames))
