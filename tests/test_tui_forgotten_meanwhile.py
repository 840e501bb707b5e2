"""Acting on a memory another client forgot meanwhile (the command line, another window),
before this app has heard of it: the action says the memory was forgotten, the memory leaves
the list, and no dialog asks again for what can never be saved. Before, pin and confirm said
"Pinning failed: no memory with id N", and the edit and expiry dialogs showed "no memory with
id N" under the words and asked again and again."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import Input

from navi_desktop.tui.dialogs import TextScreen
from navi_desktop.tui.inspector import screen as inspector_screen
from tests.test_tui_chat import chat_app, open_used
from tests.test_tui_inspector import add, held, highlight, inspector, open_tab, settled
from tests.tui_support import Daemon, error_notes, notified, until


@pytest.mark.parametrize(
    ("key", "typed", "line"), [("e", "likes bebop", "Not saved"), ("t", "7d", "Not saved")]
)
async def test_a_dialog_on_a_memory_forgotten_meanwhile_closes_and_says_so(
    daemon: Daemon, key: str, typed: str, line: str
) -> None:
    jazz = await add(daemon, "likes jazz", category="preferences", key="music")
    async with inspector(daemon) as (app, pilot, screen):
        await highlight(pilot, screen, jazz["id"])
        await pilot.press(key)
        await until(pilot, lambda: isinstance(app.screen, TextScreen))
        await daemon.call("memory.forget", {"args": [jazz["id"]]})
        app.screen.query_one("#text", Input).value = typed
        await pilot.press("enter")
        await until(pilot, lambda: app.screen is screen and settled(app))
        assert notified(app, f"{line}: it was forgotten meanwhile"), app._notifications
        assert not error_notes(app)
        await until(pilot, lambda: jazz["id"] not in screen.memory_list.memories)


async def test_pin_confirm_and_accept_of_a_memory_forgotten_meanwhile_say_so(
    daemon: Daemon, monkeypatch: Any
) -> None:
    # The reload a change brings waits: the key comes before the app has heard of the forget.
    monkeypatch.setattr(inspector_screen, "CHANGES_S", 120)
    pinned = await add(daemon, "likes jazz", category="preferences", key="music")
    confirmed = await add(daemon, "drinks tea", category="preferences", key="drink")
    city = await held(daemon, "lives in Lisbon", "city", "uncertain")
    async with inspector(daemon) as (app, pilot, screen):
        for memory, key, line in [(pinned, "p", "Not pinned"), (confirmed, "c", "Not confirmed")]:
            await highlight(pilot, screen, memory["id"])
            await daemon.call("memory.forget", {"args": [memory["id"]]})
            await pilot.press(key)
            await until(
                pilot, lambda line=line: notified(app, f"{line}: it was forgotten meanwhile")
            )
            assert memory["id"] not in screen.memory_list.memories
        await open_tab(pilot, screen, "inbox")
        await highlight(pilot, screen, city["id"])
        await daemon.call("memory.forget", {"args": [city["id"]]})
        await pilot.press("a")
        await until(pilot, lambda: notified(app, "Not accepted: it was forgotten meanwhile"))
        assert not error_notes(app)


async def test_what_did_you_use_on_a_memory_forgotten_meanwhile_says_so(fake, daemon) -> None:
    async with chat_app(fake, daemon) as (app, pilot):
        memory_id, used = await open_used(fake, daemon, app, pilot)
        await daemon.call("memory.forget", {"args": [memory_id]})
        await pilot.press("p")
        await until(pilot, lambda: notified(app, "Not pinned: it was forgotten meanwhile"))
        await until(pilot, lambda: app.screen is used and not used.injections)
        assert not error_notes(app)
