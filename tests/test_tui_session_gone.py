"""The open chat's session ceases to exist under it: deleted from another window or the
command line, or an incognito chat the daemon no longer has (it restarted). The chat starts
afresh and says why, keeping what was typed. Before, the deleted session stayed open and
every message sent failed with "no session with id ..." until Ctrl+N."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from navi_desktop.tui.chat.prompt import Prompt
from navi_desktop.tui.dialogs import ChoiceScreen, TextScreen
from tests.fake_ollama import Reply
from tests.test_tui_chat import chat_app, replies, say, tea_chat, views
from tests.tui_support import Daemon, error_notes, notified, until


async def test_a_session_deleted_elsewhere_closes_keeping_what_is_typed(fake, daemon) -> None:
    async with chat_app(fake, daemon, Reply("Tea is good."), Reply("Coffee too.")) as (app, pilot):
        chat = app.screen
        tea = await tea_chat(app, pilot)
        await pilot.press(*"half typed")
        await daemon.call("sessions.delete", {"id": tea})
        await until(pilot, lambda: notified(app, "This chat is gone (it was deleted elsewhere)"))
        assert chat.session_id is None and not views(app)
        assert chat.query_one(Prompt).text == "half typed"
        chat.query_one(Prompt).text = ""
        await say(app, pilot, "and coffee?")
        assert chat.session_id not in (None, tea) and replies(app) == ["Coffee too."]
        assert not error_notes(app)


async def test_deleting_here_is_not_said_to_be_elsewhere(fake, daemon) -> None:
    async with chat_app(fake, daemon, Reply("Tea is good.")) as (app, pilot):
        chat = app.screen
        await tea_chat(app, pilot)
        await pilot.press("f8")
        await until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        await pilot.click("#choice-yes")
        await until(pilot, lambda: notified(app, "Session deleted"))
        await pilot.pause(0.3)  # the daemon's notice of the delete comes too
        assert chat.session_id is None
        assert not notified(app, "gone") and not error_notes(app)


async def test_an_incognito_chat_the_restarted_daemon_lacks_starts_afresh(fake, daemon) -> None:
    scripted = Reply("Off the record."), Reply("Still here.")
    async with chat_app(fake, daemon, *scripted, incognito=True) as (app, pilot):
        chat = app.screen
        await say(app, pilot, "a secret")
        await daemon.stop()
        await until(pilot, lambda: not app.link.connected)
        restarted = await Daemon(daemon.paths).start()
        try:
            await until(pilot, lambda: app.link.connected, timeout=30)
            await pilot.press(*"another secret", "enter")
            await until(
                pilot, lambda: notified(app, "This chat is gone (the daemon no longer has it)")
            )
            assert chat.query_one(Prompt).text == "another secret"
            assert chat.session_id is None and chat.incognito
            await pilot.press("enter")  # sent again: a new incognito chat answers it
            await until(pilot, lambda: replies(app) == ["Still here."] and chat.reply is None)
            assert not error_notes(app)
        finally:
            await restarted.stop()


@pytest.mark.parametrize("key", ["f7", "f9"])  # rename, export
async def test_a_dialog_on_a_session_deleted_meanwhile_closes(fake, daemon, key, tmp_path) -> None:
    """Before, the rename and export dialogs showed "no session with id ..." under the words
    and asked again for as long as the user tried."""
    async with chat_app(fake, daemon, Reply("Tea is good.")) as (app, pilot):
        chat = app.screen
        tea = await tea_chat(app, pilot)
        await pilot.press(key)
        await until(pilot, lambda: isinstance(app.screen, TextScreen))
        await daemon.call("sessions.delete", {"id": tea})
        app.screen.query_one("#text", Input).value = str(tmp_path / "tea.md")
        await pilot.press("enter")
        await until(pilot, lambda: app.screen is chat and chat.session_id is None)
        gone = [n for n in app._notifications if "This chat is gone" in n.message]
        assert len(gone) == 1 and not error_notes(app)
        assert not (tmp_path / "tea.md").exists()
