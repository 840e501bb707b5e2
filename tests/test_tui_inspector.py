"""The memory inspector against a real daemon (real store file, fake Ollama): what each tab
lists, search, the detail pane, the actions on a memory, and live updates; plus snapshots."""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.widgets import Input, Select, Static, TabbedContent

from navi_desktop.daemon.client import RemoteNotFound
from navi_desktop.memory.models import CATEGORIES as ENGINE_CATEGORIES
from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.inspector.data import CATEGORIES
from navi_desktop.tui.inspector.detail import DetailPane
from navi_desktop.tui.inspector.lists import MemoryList
from navi_desktop.tui.inspector.screen import InspectorScreen
from tests.tui_support import (
    SIZE,
    Daemon,
    ThreadedDaemon,
    make_home,
    snapshot_daemon,
    until,
)

SNAPSHOT_PORT = 27812  # other TUI snapshot tests use 27811 and 27813 at the same time


async def add(daemon: Daemon, value: str, **fields: Any) -> dict[str, Any]:
    reply = await daemon.call("memory.add", {"args": [value], "kwargs": fields})
    return reply["memory"]


async def seed(daemon: Daemon) -> dict[str, dict[str, Any]]:
    return {
        "tea": await add(
            daemon,
            "green tea, no sugar",
            category="preferences",
            key="drink",
            evidence="I only drink green tea, never with sugar",
            source="conversation",
            confidence=0.9,
        ),
        "rust": await add(daemon, "writes Rust at work", category="technical", key="language"),
        "cat": await add(daemon, "has a cat called Miso", category="relationships", key="pet"),
        "jazz": await add(daemon, "likes jazz", category="preferences", key="music"),
    }


def rows(screen: InspectorScreen, tab: str) -> list[str]:
    options = screen.query_one(f"#list-{tab}", MemoryList)
    return [options.get_option_at_index(i).prompt.plain for i in range(options.option_count)]


def detail_plain(app: NaviApp) -> str:
    """The detail pane's text, as printed 100 columns wide."""
    console = Console(width=100, file=io.StringIO(), color_system=None)
    console.print(app.screen.query_one(DetailPane).content)
    return console.file.getvalue()  # type: ignore[attr-defined]


def settled(app: NaviApp) -> bool:
    """No worker busy but the daemon link (which runs for as long as the app)."""
    return all(w.is_finished for w in app.workers if w.group != "link")


@contextlib.asynccontextmanager
async def inspector(daemon: Daemon) -> AsyncIterator[tuple[NaviApp, Any, InspectorScreen]]:
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.link.connected)
        await pilot.press("f3")
        await until(pilot, lambda: isinstance(app.screen, InspectorScreen))
        screen = app.screen
        assert isinstance(screen, InspectorScreen)
        yield app, pilot, screen


async def highlight(pilot: Any, screen: InspectorScreen, memory_id: int) -> None:
    memory_list = screen.memory_list
    await until(pilot, lambda: memory_id in memory_list.memories)
    memory_list.highlighted = memory_list.get_option_index(str(memory_id))
    await until(pilot, lambda: screen.history_of == memory_id)


def test_categories_match_the_engine() -> None:
    assert CATEGORIES == ENGINE_CATEGORIES


async def test_facts_grouped_by_category_with_counts(daemon: Daemon) -> None:
    await seed(daemon)
    async with inspector(daemon) as (_app, pilot, screen):
        await until(pilot, lambda: len(rows(screen, "facts")) == 7)
        assert rows(screen, "facts") == [
            "Preferences (2)",
            "  music: likes jazz",
            "  drink: green tea, no sugar",
            "Technical (1)",
            "  language: writes Rust at work",
            "Relationships (1)",
            "  pet: has a cat called Miso",
        ]
        tabs = screen.query_one(TabbedContent)
        await until(pilot, lambda: tabs.get_tab("facts").label.plain == "Facts (4)")
        assert tabs.get_tab("inbox").label.plain == "Inbox (0)"


async def test_search_filters_and_accepts_any_text(daemon: Daemon) -> None:
    await seed(daemon)
    async with inspector(daemon) as (app, pilot, screen):
        await until(pilot, lambda: len(rows(screen, "facts")) == 7)
        await pilot.press("slash")
        assert app.focused is screen.query_one("#search", Input)
        await pilot.press(*"jazz")
        await until(
            pilot, lambda: rows(screen, "facts") == ["Preferences (1)", "  music: likes jazz"]
        )
        for text in ['"unbalanced', "NEAR(tea", "tea 🍵 OR", "a*b:c-(d)"]:
            screen.query_one("#search", Input).value = text
            await pilot.pause(0.3)
            await until(pilot, lambda: settled(app))
            assert not [n for n in app._notifications if n.severity == "error"]
        # A pasted page past what a search takes is said in words, not as a parameter.
        screen.query_one("#search", Input).value = "tea " * 2_501
        said = "A search is at most 10,000 characters, and this one has 10,004"
        await until(pilot, lambda: rows(screen, "facts")[0].startswith(said))
        assert not app._notifications
        # The category filter applies to search and to the full list.
        screen.query_one("#search", Input).value = ""
        screen.query_one("#category", Select).value = "technical"
        await until(
            pilot,
            lambda: rows(screen, "facts") == ["Technical (1)", "  language: writes Rust at work"],
        )
        screen.query_one("#category", Select).value = Select.NULL
        await until(pilot, lambda: len(rows(screen, "facts")) == 7)


async def test_detail_shows_evidence_and_history(daemon: Daemon) -> None:
    memories = await seed(daemon)
    tea = memories["tea"]
    await daemon.call("memory.edit", {"args": [tea["id"]], "kwargs": {"value": "green tea"}})
    async with inspector(daemon) as (app, pilot, screen):
        await highlight(pilot, screen, tea["id"])
        await until(pilot, lambda: "(by you)" in detail_plain(app))
        text = " ".join(detail_plain(app).split())
        assert "Fact #1 · preferences" in text
        # The quote supported the value before the edit, and says so.
        assert (
            "“I only drink green tea, never with sugar” said of the earlier value “green tea,"
            " no sugar”" in text
        )
        assert "Source conversation" in text and "Confidence 0.90" in text
        assert "added by you" in text
        assert "value changed from “green tea, no sugar” to “green tea” (by you)" in text
        assert "edit by user" not in text and "→" not in text.split("History")[1]


async def ask_to_forget(pilot: Any, screen: InspectorScreen, memory_id: int) -> None:
    await highlight(pilot, screen, memory_id)
    await pilot.press("f")
    await until(pilot, lambda: pilot.app.screen.__class__.__name__ == "ConfirmScreen")


async def test_forget_removes_it_everywhere(daemon: Daemon) -> None:
    tea = (await seed(daemon))["tea"]
    async with inspector(daemon) as (app, pilot, screen):
        await ask_to_forget(pilot, screen, tea["id"])
        await pilot.click("#choice-yes")
        await until(pilot, lambda: tea["id"] not in screen.memory_list.memories)
        assert not any("green tea" in r for r in rows(screen, "facts"))
        assert "green tea" not in detail_plain(app)
        with pytest.raises(RemoteNotFound):
            await daemon.call("memory.get", {"args": [tea["id"]]})


async def test_forgetting_what_was_forgotten_elsewhere_meanwhile_is_no_error(
    daemon: Daemon,
) -> None:
    """The command line forgets the memory while the confirm is open: the outcome is the
    one wanted, so it is said as such (before: "Forgetting failed: no memory with id N")."""
    tea = (await seed(daemon))["tea"]
    async with inspector(daemon) as (app, pilot, screen):
        await ask_to_forget(pilot, screen, tea["id"])
        await daemon.call("memory.forget", {"args": [tea["id"]]})
        await pilot.click("#choice-yes")
        await until(
            pilot, lambda: any("Already forgotten" in n.message for n in app._notifications)
        )
        assert not [n for n in app._notifications if n.severity == "error"]
        await until(pilot, lambda: tea["id"] not in screen.memory_list.memories)


async def test_forget_can_be_cancelled(daemon: Daemon) -> None:
    tea = (await seed(daemon))["tea"]
    async with inspector(daemon) as (app, pilot, screen):
        await ask_to_forget(pilot, screen, tea["id"])
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)
        await ask_to_forget(pilot, screen, tea["id"])  # Enter: the safe choice, not forget
        await pilot.press("enter")
        await until(pilot, lambda: app.screen is screen)
        assert (await daemon.call("memory.get", {"args": [tea["id"]]}))["id"] == tea["id"]
        assert tea["id"] in screen.memory_list.memories


async def test_pin_and_unpin(daemon: Daemon) -> None:
    jazz = (await seed(daemon))["jazz"]
    async with inspector(daemon) as (app, pilot, screen):
        await highlight(pilot, screen, jazz["id"])
        await pilot.press("p")
        await until(pilot, lambda: "  music: likes jazz 📌" in rows(screen, "facts"))
        assert (await daemon.call("memory.get", {"args": [jazz["id"]]}))["pinned"] is True
        await until(pilot, lambda: "pinned" in detail_plain(app))
        await pilot.press("p")
        await until(pilot, lambda: "  music: likes jazz" in rows(screen, "facts"))
        assert (await daemon.call("memory.get", {"args": [jazz["id"]]}))["pinned"] is False


async def test_edit_the_value(daemon: Daemon) -> None:
    jazz = (await seed(daemon))["jazz"]
    async with inspector(daemon) as (app, pilot, screen):
        await highlight(pilot, screen, jazz["id"])
        await pilot.press("e")
        await until(pilot, lambda: app.screen.__class__.__name__ == "TextScreen")
        app.screen.query_one("#text", Input).value = "likes modal jazz"
        await pilot.press("enter")
        await until(pilot, lambda: "  music: likes modal jazz" in rows(screen, "facts"))
        got = await daemon.call("memory.get", {"args": [jazz["id"]]})
        assert got["value"] == "likes modal jazz"
        # The screen kept the edited memory highlighted and shows its new history.
        assert screen.current is not None and screen.current["id"] == jazz["id"]
        changed = "from “likes jazz” to “likes modal jazz”"
        await until(pilot, lambda: changed in " ".join(detail_plain(app).split()))


async def test_an_edit_the_daemon_refuses_keeps_the_words_and_says_why(daemon: Daemon) -> None:
    """Before, a value past the daemon's limit closed the dialog with an error notice, and
    the words typed were gone."""
    from navi_desktop.tui.dialogs import TextScreen

    jazz = (await seed(daemon))["jazz"]
    too_long = "v" * 20_001
    async with inspector(daemon) as (app, pilot, screen):
        await highlight(pilot, screen, jazz["id"])
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, TextScreen))
        app.screen.query_one("#text", Input).value = too_long
        await pilot.press("enter")
        said = "a memory's text is at most 20,000 characters, and this one has 20,001"
        await until(pilot, lambda: said in error_text(app))
        assert "parameter" not in error_text(app)
        assert isinstance(app.screen, TextScreen)
        assert app.screen.query_one("#text", Input).value == too_long
        app.screen.query_one("#text", Input).value = "likes free jazz"
        await pilot.press("enter")
        await until(pilot, lambda: "  music: likes free jazz" in rows(screen, "facts"))
    assert (await daemon.call("memory.get", {"args": [jazz["id"]]}))["value"] == "likes free jazz"


def error_text(app: NaviApp) -> str:
    return (
        str(app.screen.query_one("#error", Static).render()) if app.screen.query("#error") else ""
    )


async def held(daemon: Daemon, value: str, key: str, reason: str) -> dict[str, Any]:
    return await add(
        daemon,
        value,
        category="profile",
        key=key,
        status="held",
        source="conversation",
        review_reason=reason,
    )


async def open_tab(pilot: Any, screen: InspectorScreen, tab: str) -> None:
    await pilot.click(f"#--content-tab-{tab}")
    await until(pilot, lambda: screen.tab.id == tab)


async def test_accept_from_the_inbox(daemon: Daemon) -> None:
    await seed(daemon)
    city = await held(daemon, "lives in Lisbon", "city", "uncertain: said in passing")
    async with inspector(daemon) as (app, pilot, screen):
        await until(pilot, lambda: len(rows(screen, "facts")) == 7)
        assert "Accept" not in str(app.screen.active_bindings)  # hidden outside the inbox
        await open_tab(pilot, screen, "inbox")
        await until(pilot, lambda: city["id"] in screen.memory_list.memories)
        assert rows(screen, "inbox") == [
            "[profile] city: lives in Lisbon\n  ⚑ uncertain: said in passing"
        ]
        await highlight(pilot, screen, city["id"])
        await pilot.press("a")
        await until(pilot, lambda: rows(screen, "inbox") == ["Nothing to review."])
        assert (await daemon.call("memory.get", {"args": [city["id"]]}))["status"] == "active"
        await open_tab(pilot, screen, "facts")
        await until(pilot, lambda: "  city: lives in Lisbon" in rows(screen, "facts"))


async def test_edit_then_accept(daemon: Daemon) -> None:
    city = await held(daemon, "lives in Lisbn", "city", "uncertain")
    async with inspector(daemon) as (app, pilot, screen):
        await open_tab(pilot, screen, "inbox")
        await highlight(pilot, screen, city["id"])
        await pilot.press("E")
        await until(pilot, lambda: app.screen.__class__.__name__ == "TextScreen")
        app.screen.query_one("#text", Input).value = "lives in Lisbon"
        await pilot.press("enter")
        await until(pilot, lambda: rows(screen, "inbox") == ["Nothing to review."])
        got = await daemon.call("memory.get", {"args": [city["id"]]})
        assert (got["status"], got["value"]) == ("active", "lives in Lisbon")


async def test_reject_forgets_the_candidate(daemon: Daemon) -> None:
    city = await held(daemon, "lives in Lisbon", "city", "uncertain")
    async with inspector(daemon) as (app, pilot, screen):
        await open_tab(pilot, screen, "inbox")
        await highlight(pilot, screen, city["id"])
        await pilot.press("x")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen")
        await pilot.click("#choice-yes")
        await until(pilot, lambda: rows(screen, "inbox") == ["Nothing to review."])
        with pytest.raises(RemoteNotFound):
            await daemon.call("memory.get", {"args": [city["id"]]})
        # Not learned again: the same candidate from a conversation is blocked.
        again = await daemon.call(
            "memory.add",
            {"args": ["lives in Lisbon"], "kwargs": {"key": "city", "source": "conversation"}},
        )
        assert again["action"] == "blocked"


async def test_accept_applies_only_to_held_candidates(daemon: Daemon) -> None:
    jazz = (await seed(daemon))["jazz"]
    async with inspector(daemon) as (_app, pilot, screen):
        await highlight(pilot, screen, jazz["id"])
        assert screen.check_action("accept", ()) is False
        assert screen.check_action("forget", ()) is True
        assert screen.check_action("open_session", ()) is None
        await pilot.press("a")
        await pilot.pause(0.2)
        assert (await daemon.call("memory.get", {"args": [jazz["id"]]}))["status"] == "active"


async def test_actions_are_palette_commands(daemon: Daemon) -> None:
    await seed(daemon)
    await held(daemon, "lives in Lisbon", "city", "uncertain")
    async with inspector(daemon) as (app, pilot, screen):
        await until(pilot, lambda: screen.history_of is not None)
        titles = {command.title for command in app.get_system_commands(screen)}
        assert {"Search", "Forget", "Edit", "Pin / unpin", "Export memory"} <= titles
        assert not {"Accept", "Reject", "Open session"} & titles  # none apply here
        await open_tab(pilot, screen, "inbox")
        await until(pilot, lambda: screen.current is not None)
        titles = {command.title for command in app.get_system_commands(screen)}
        assert {"Accept", "Edit & accept", "Reject"} <= titles


async def test_live_update_from_another_client(daemon: Daemon) -> None:
    jazz = (await seed(daemon))["jazz"]
    async with inspector(daemon) as (_app, pilot, screen):
        await highlight(pilot, screen, jazz["id"])
        await add(daemon, "prefers dark mode", category="preferences", key="theme")
        await until(pilot, lambda: "  theme: prefers dark mode" in rows(screen, "facts"))
        assert screen.current is not None and screen.current["id"] == jazz["id"]
        await daemon.call("memory.forget", {"args": [jazz["id"]]})
        await until(pilot, lambda: jazz["id"] not in screen.memory_list.memories)
        # Away in another mode and back: what changed meanwhile shows.
        await pilot.press("f2")
        await add(daemon, "speaks Portuguese", category="profile", key="language")
        await pilot.press("f3")
        await until(pilot, lambda: "  language: speaks Portuguese" in rows(screen, "facts"))
        await add(daemon, "runs on Sundays", category="other", key="sport")
        await until(pilot, lambda: "  sport: runs on Sundays" in rows(screen, "facts"))


async def test_episodes_and_rules_tabs(daemon: Daemon) -> None:
    session = await daemon.call("sessions.create", {"title": "Trip planning"})
    await add(
        daemon,
        "Planned a trip to Porto in May.",
        kind="episode",
        source="conversation",
        session_id=session["id"],
    )
    await add(daemon, "Answer in British English.", kind="rule")
    async with inspector(daemon) as (app, pilot, screen):
        await open_tab(pilot, screen, "episodes")
        await until(
            pilot, lambda: rows(screen, "episodes") == ["  now Planned a trip to Porto in May."]
        )
        screen.memory_list.focus()
        screen.memory_list.highlighted = 0
        await until(
            pilot, lambda: "Trip" not in detail_plain(app) and "session" in detail_plain(app)
        )
        assert screen.check_action("open_session", ()) is True
        await open_tab(pilot, screen, "rules")
        await until(pilot, lambda: rows(screen, "rules") == ["Answer in British English."])
        await until(pilot, lambda: "Rule #2" in detail_plain(app))


async def test_open_session_switches_to_chat(daemon: Daemon) -> None:
    session = await daemon.call("sessions.create", {})
    memory = await add(daemon, "likes jazz", key="music", session_id=session["id"])
    async with inspector(daemon) as (app, pilot, screen):
        await highlight(pilot, screen, memory["id"])
        await pilot.press("j")
        await until(pilot, lambda: app.current_mode == "chat")


async def test_archived_ones_show_with_the_switch(daemon: Daemon) -> None:
    jazz = (await seed(daemon))["jazz"]
    await daemon.call("memory.archive", {"args": [jazz["id"]]})
    async with inspector(daemon) as (_app, pilot, screen):
        await until(pilot, lambda: len(rows(screen, "facts")) == 6)
        assert not any("jazz" in r for r in rows(screen, "facts"))
        await pilot.click("#inactive")
        await until(pilot, lambda: "  music: likes jazz (archived)" in rows(screen, "facts"))


async def test_export_asks_where_and_never_replaces_a_file_unasked(
    daemon: Daemon, tmp_path: Path
) -> None:
    from navi_desktop.tui.dialogs import ConfirmScreen, TextScreen

    await seed(daemon)
    path = tmp_path / "my memory.md"
    path.write_text("my own notes")
    async with inspector(daemon) as (app, pilot, _screen):
        for answer in ("no", "yes"):
            await pilot.press("f9")
            await until(pilot, lambda: isinstance(app.screen, TextScreen))
            assert app.screen.query_one("#text", Input).value.endswith("navi-memory-tester.md")
            app.screen.query_one("#text", Input).value = str(path)
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.click(f"#choice-{answer}")
            await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
            if answer == "no":
                await pilot.pause(0.2)
                assert path.read_text() == "my own notes"
        await until(pilot, lambda: "likes jazz" in path.read_text())
        assert oct(path.stat().st_mode & 0o777) == "0o600"


async def test_an_export_path_that_cannot_be_used_is_said_in_the_dialog(
    daemon: Daemon, tmp_path: Path
) -> None:
    """A name too long, a ~user with no home and a folder that cannot be written: each is
    one line under the path, which stays as typed. Before, the first two were a traceback
    that closed the app, and the third named a temporary file and lost the path."""
    from navi_desktop.tui.dialogs import TextScreen

    await seed(daemon)
    locked = tmp_path / "proc-like"
    locked.mkdir()
    (locked / "x.md").mkdir()  # a folder where the temporary file would go: the write fails
    answers = [
        (str(tmp_path / ("a" * 300)), "File name too long"),
        ("~no-such-user-here/x.md", "names no user's home folder"),
        (str(tmp_path / "missing" / "x.md"), "does not exist"),
        (str(locked / "x.md"), "is a folder"),
    ]
    async with inspector(daemon) as (app, pilot, _screen):
        await pilot.press("f9")
        await until(pilot, lambda: isinstance(app.screen, TextScreen))
        for typed, said in answers:
            app.screen.query_one("#text", Input).value = typed
            await pilot.press("enter")
            await until(pilot, lambda said=said: said in error_text(app))
            assert app.screen.query_one("#text", Input).value == typed
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, TextScreen))
        assert app.is_running


async def test_an_export_that_cannot_be_written_asks_again_with_the_path_typed(
    daemon: Daemon, tmp_path: Path
) -> None:
    """/proc is a folder no file can be made in: the write fails after every check passed.
    The dialog comes back with the path typed and the reason naming it (before: a notice
    naming a temporary file, and the path was gone)."""
    from navi_desktop.tui.dialogs import TextScreen

    await seed(daemon)
    typed = "/proc/navi-memory.md"
    target = tmp_path / "memory.md"
    async with inspector(daemon) as (app, pilot, _screen):
        await pilot.press("f9")
        await until(pilot, lambda: isinstance(app.screen, TextScreen))
        app.screen.query_one("#text", Input).value = typed
        await pilot.press("enter")
        await until(pilot, lambda: f"cannot write {typed}: " in error_text(app))
        assert app.screen.query_one("#text", Input).value == typed
        assert ".tmp" not in error_text(app)
        app.screen.query_one("#text", Input).value = str(target)
        await pilot.press("enter")
        await until(pilot, lambda: target.exists() and "likes jazz" in target.read_text())


async def test_opens_without_a_daemon(tmp_path: Path) -> None:
    app = NaviApp(make_home(tmp_path, "http://127.0.0.1:9"), autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        await until(pilot, lambda: isinstance(app.screen, InspectorScreen))
        screen = app.screen
        assert isinstance(screen, InspectorScreen)
        await until(pilot, lambda: "No connection to the Navi daemon" in rows(screen, "facts")[0])
        assert "No connection" in detail_plain(app)
        await pilot.press("f")  # nothing to act on: no dialog, no traceback
        await pilot.pause(0.1)
        assert app.screen is screen


# -- snapshots -------------------------------------------------------------------------------


@pytest.fixture
def threaded(tmp_path: Path) -> Any:
    with snapshot_daemon(tmp_path, SNAPSHOT_PORT) as running:
        yield running


def seed_threaded(daemon: ThreadedDaemon) -> None:
    def add_now(value: str, **fields: Any) -> None:
        daemon.call("memory.add", {"args": [value], "kwargs": fields})

    add_now(
        "green tea, no sugar",
        category="preferences",
        key="drink",
        evidence="I only drink green tea, never with sugar",
        source="conversation",
        confidence=0.9,
    )
    add_now("writes Rust at work", category="technical", key="language")
    add_now("likes jazz", category="preferences", key="music")
    add_now(
        "lives in Lisbon",
        category="profile",
        key="city",
        status="held",
        source="conversation",
        review_reason="uncertain: said in passing",
    )


def loaded(app: NaviApp, facts: int) -> bool:
    screen = app.screen
    return (
        isinstance(screen, InspectorScreen)
        and len(screen.query_one("#list-facts", MemoryList).memories) == facts
        and screen.history_of is not None
        and screen.query_one(TabbedContent).get_tab("inbox").label.plain == "Inbox (1)"
    )


async def open_loaded(pilot: Any) -> None:
    """Open the inspector once the daemon answers, and wait for the seeded memories."""
    await pilot.pause()
    await until(pilot, lambda: pilot.app.link.connected)
    await pilot.press("f3")
    await until(pilot, lambda: loaded(pilot.app, 3))


def test_snapshot_facts_and_inbox(snap_compare: Any, threaded: ThreadedDaemon) -> None:
    seed_threaded(threaded)

    async def run_before(pilot: Any) -> None:
        await open_loaded(pilot)
        await until(pilot, lambda: settled(pilot.app))

    app = NaviApp(threaded.paths, autostart=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_snapshot_detail_pane(snap_compare: Any, threaded: ThreadedDaemon) -> None:
    seed_threaded(threaded)
    threaded.call("memory.edit", {"args": [1], "kwargs": {"value": "green tea"}})

    async def run_before(pilot: Any) -> None:
        await open_loaded(pilot)
        screen = pilot.app.screen
        screen.memory_list.highlighted = screen.memory_list.get_option_index("1")
        await until(pilot, lambda: screen.history_of == 1)
        await until(pilot, lambda: settled(pilot.app))

    app = NaviApp(threaded.paths, autostart=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_snapshot_inbox(snap_compare: Any, threaded: ThreadedDaemon) -> None:
    seed_threaded(threaded)

    async def run_before(pilot: Any) -> None:
        await open_loaded(pilot)
        screen = pilot.app.screen
        await open_tab(pilot, screen, "inbox")
        await until(pilot, lambda: screen.history_of == 4)
        await until(pilot, lambda: settled(pilot.app))

    app = NaviApp(threaded.paths, autostart=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_the_forget_dialog_says_what_a_forget_leaves() -> None:
    """An episode's conversation stays when the episode goes: the dialog says so, with the
    session's title as the user wrote it (never read as markup)."""
    from navi_desktop.tui.dialogs import forget_body

    kept = (
        "The conversation it sums up stays: \u201c[b]Moving[/b]\u201d, 3 messages."
        " Delete that session to remove it too."
    )
    preview = {"everywhere": [], "evidence": [], "rule": "whole words", "kept": kept}
    shown = forget_body("#7 Planned a move abroad.", preview)  # the dialog shows it as plain text
    assert "It occurs nowhere else.\n" + kept + "\n" in shown
    preview["kept"] = "The conversation it sums up stays: \u201ctwo\nlines\u201d, 1 message."
    assert "\u201ctwo lines\u201d, 1 message.\n" in forget_body("#7", preview)  # one line
    preview["kept"] = None  # a fact, or a session deleted since
    assert "stays" not in forget_body("#8 Lisbon", preview)
