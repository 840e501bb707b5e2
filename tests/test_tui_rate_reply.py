"""Rating a reply in the app: F11 on the last reply, a note, the mark under the reply (also
after reopening the session), and the flag on the memories it used in the inspector."""

from __future__ import annotations

from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.chat.rate import RateScreen
from navi_desktop.tui.inspector.screen import InspectorScreen
from tests.fake_ollama import Reply
from tests.test_tui_chat import ready, say, views
from tests.test_tui_inspector import detail_plain, highlight
from tests.tui_support import SIZE, until


def rating_lines(app: NaviApp) -> list[str]:
    return [str(label.render()) for label in app.screen.query(".rating")]


async def test_a_bad_rating_marks_the_reply_and_flags_what_it_used(fake, daemon):
    added = await daemon.call(
        "memory.add", {"args": ["Lisbon"], "kwargs": {"key": "home city", "category": "profile"}}
    )
    memory_id = added["memory"]["id"]
    fake.script(Reply("You live in Lisbon."))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await say(app, pilot, "Which city is my home city, Lisbon?")
        chat = app.screen
        await pilot.press("f11")
        await until(pilot, lambda: isinstance(app.screen, RateScreen))
        await pilot.press(*"I moved to Porto", "enter")  # Enter goes to the buttons
        await pilot.press("enter")  # "Bad" has the focus
        await until(pilot, lambda: app.screen is chat and rating_lines(app))
        assert rating_lines(app) == ["(rated bad: I moved to Porto)"]
        session = chat.session_id
        [rating] = (await daemon.call("chat.ratings", {"session_id": session}))["ratings"]
        assert (rating["rating"], rating["note"]) == ("down", "I moved to Porto")

        # Rated again: the mark is replaced, not added.
        await pilot.press("f11")
        await until(pilot, lambda: isinstance(app.screen, RateScreen))
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is chat)
        assert rating_lines(app) == ["(rated bad: I moved to Porto)"]

        # Reopened, the session shows its rating again.
        await pilot.press("ctrl+n")
        await until(pilot, lambda: not views(app))
        await chat.action_open_session(session)
        await until(pilot, lambda: rating_lines(app) == ["(rated bad: I moved to Porto)"])

        await pilot.press("f3")
        await until(pilot, lambda: isinstance(app.screen, InspectorScreen))
        await highlight(pilot, app.screen, memory_id)
        await until(pilot, lambda: "Flagged" in detail_plain(app))
        text = " ".join(detail_plain(app).split())
        assert "used in 1 reply you rated bad · “I moved to Porto”" in text
    memory = await daemon.call("memory.get", {"args": [memory_id]})
    assert (memory["value"], memory["status"]) == ("Lisbon", "active")  # changed by nothing
