"""Words that look like Textual markup ("[/]", "[b]...[/b]", "[@click=...]") in a session's
title are shown as written: the chat's title bar and the confirm dialogs never read them as
markup. Before, a first message or a rename holding "[/]" closed the app with a MarkupError
(the title bar), a first message was refused with "Starting a session failed: auto closing
tag...", and F8 on such a session closed the app (the delete dialog's body)."""

from __future__ import annotations

from textual.widgets import Label, Static

from navi_desktop.tui.chat.prompt import Prompt
from navi_desktop.tui.dialogs import ConfirmScreen
from tests.fake_ollama import Reply
from tests.test_tui_chat import chat_app, replies
from tests.tui_support import error_notes, until

LIKE_MARKUP = "[/] [b]tea[/b] [@click=app.quit]quit[/]"


async def test_a_title_like_markup_is_shown_as_written(fake, daemon) -> None:
    async with chat_app(fake, daemon, Reply("Tea is good.")) as (app, pilot):
        chat = app.screen
        chat.query_one(Prompt).text = LIKE_MARKUP
        await pilot.press("enter")
        await until(pilot, lambda: replies(app) == ["Tea is good."] and chat.reply is None)
        await until(pilot, lambda: chat.sessions.title_of(chat.session_id) == LIKE_MARKUP)
        await pilot.pause(0.2)  # the title bar follows the list
        assert str(chat.query_one("#chat-title", Label).render()) == LIKE_MARKUP
        await pilot.press("f8")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        body = str(app.screen.query_one(".body", Static).render())
        assert body.startswith(LIKE_MARKUP + "\n")
        await pilot.click("#choice-yes")
        await until(pilot, lambda: chat.session_id is None and not chat.sessions.sessions)
        assert app.is_running and not error_notes(app)
