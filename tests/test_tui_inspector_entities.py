"""The inspector's Entities tab against a real daemon (real store file, fake Ollama), driven
with Pilot: the list, the detail pane, rename and merge through their dialogs (refusals shown
in place), the memory keys kept off the tab, and live updates."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from textual.widgets import Input, Select, Static

from navi_desktop.tui.inspector.entities import EntityDetail, EntityList, NameScreen
from navi_desktop.tui.inspector.screen import InspectorScreen
from tests.test_tui_inspector import add, inspector
from tests.tui_support import Daemon, until


async def seed(daemon: Daemon) -> dict[str, int]:
    return {
        "home": (await add(daemon, "moved to Lisbon last year", key="home city"))["id"],
        "pastry": (await add(daemon, "Lisboa has the best pastel de nata"))["id"],
        "sister": (await add(daemon, "Joana lives in Porto", key="sister"))["id"],
    }


def rows(screen: InspectorScreen) -> list[str]:
    options = screen.query_one(EntityList)
    return [options.get_option_at_index(i).prompt.plain for i in range(options.option_count)]


def detail(screen: InspectorScreen) -> str:
    console = Console(width=100, file=io.StringIO(), color_system=None)
    console.print(screen.query_one(EntityDetail).content)
    return " ".join(console.file.getvalue().split())  # type: ignore[attr-defined]


async def entities_tab(pilot: Any, screen: InspectorScreen, count: int) -> None:
    await pilot.press("5")
    await until(
        pilot, lambda: screen.on_entities and len(screen.query_one(EntityList).entities) == count
    )
    await until(pilot, lambda: screen.query_one(EntityDetail).shown is not None)


async def pick(pilot: Any, screen: InspectorScreen, name: str) -> None:
    entity_list = screen.query_one(EntityList)
    entity_list.highlighted = entity_list.get_option_index(name)
    await until(pilot, lambda: (screen.query_one(EntityDetail).shown or {}).get("name") == name)


async def dialog_error(pilot: Any, text: str) -> str:
    """Type ``text`` into the open name dialog, press Enter; the error it shows, if any."""
    dialog = pilot.app.screen
    assert isinstance(dialog, NameScreen)
    dialog.query_one("#name", Input).value = text
    await pilot.press("enter")
    await pilot.pause(0.2)
    if pilot.app.screen is not dialog:
        return ""
    await until(pilot, lambda: str(dialog.query_one("#error", Static).content) != "")
    return str(dialog.query_one("#error", Static).content)


async def test_the_tab_lists_entities_and_shows_one_in_full(daemon: Daemon) -> None:
    ids = await seed(daemon)
    await daemon.call("memory.merge_entities", {"args": ["porto", "joana"]})
    async with inspector(daemon) as (app, pilot, screen):
        await entities_tab(pilot, screen, 3)
        assert rows(screen) == ["lisboa  1×", "lisbon  1×", "porto  1×  also joana"]
        await pick(pilot, screen, "lisbon")
        text = detail(screen)
        assert text.startswith("lisbon mentioned by 1 memory and 0 messages Also called —")
        assert f"Facts (1) home city: moved to Lisbon last year #{ids['home']}" in text
        assert "Session summaries (0) None." in text
        await pick(pilot, screen, "porto")
        assert "Also called joana" in detail(screen)
        # The memory filters and keys do not apply here; the entity keys do.
        assert not screen.query_one("#category", Select).display
        assert screen.check_action("forget", ()) is False
        assert screen.check_action("edit", ()) is False
        await pilot.press("f")  # nothing opens
        await pilot.pause(0.1)
        assert app.screen is screen
        keys = {b.binding.key for b in screen.active_bindings.values()}
        assert {"r", "m"} <= keys
        # Back on a memory tab, the memory keys come back.
        await pilot.press("1")
        await until(pilot, lambda: not screen.on_entities)
        assert screen.check_action("forget", ()) is not False


async def test_rename_shows_a_refusal_in_place_then_renames(daemon: Daemon) -> None:
    await seed(daemon)
    async with inspector(daemon) as (app, pilot, screen):
        await entities_tab(pilot, screen, 4)
        await pick(pilot, screen, "lisbon")
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, NameScreen))
        assert app.screen.query_one("#name", Input).value == "lisbon"
        assert await dialog_error(pilot, "  ") == "a name cannot be empty"
        taken = await dialog_error(pilot, "Porto")
        assert taken == (
            "there is already an entity named 'porto': merge instead (keep 'porto' and merge"
            " 'lisbon' into it)"
        )
        assert await dialog_error(pilot, "Lisbon City") == ""
        await until(pilot, lambda: "Lisbon City  1×  also lisbon" in rows(screen))
        assert screen.query_one(EntityList).current["name"] == "Lisbon City"
        await until(pilot, lambda: "Also called lisbon" in detail(screen))
        profile = await daemon.call("memory.entity", {"args": ["lisbon"]})
        assert (profile["name"], profile["aliases"]) == ("Lisbon City", ["lisbon"])


async def test_merge_asks_which_then_confirms(daemon: Daemon) -> None:
    ids = await seed(daemon)
    async with inspector(daemon) as (app, pilot, screen):
        await entities_tab(pilot, screen, 4)
        await pick(pilot, screen, "lisbon")
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, NameScreen))
        assert (
            await dialog_error(pilot, "lisbn") == "no entity named 'lisbn'; did you mean 'lisbon'?"
        )
        assert (
            await dialog_error(pilot, "LISBON") == "“LISBON” is lisbon itself: name another entity"
        )
        assert await dialog_error(pilot, "Lisboa") == ""
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen")
        body = str(app.screen.query_one(".body", Static).content)
        assert "its names (lisboa) become aliases of “lisbon”" in body
        await pilot.click("#choice-yes")
        await until(pilot, lambda: "lisbon  2×  also lisboa" in rows(screen))
        assert not any(r.startswith("lisboa") for r in rows(screen))
        await until(pilot, lambda: "Facts (2)" in detail(screen))
        assert f"#{ids['pastry']}" in detail(screen)


async def test_a_merge_can_be_cancelled(daemon: Daemon) -> None:
    await seed(daemon)
    async with inspector(daemon) as (app, pilot, screen):
        await entities_tab(pilot, screen, 4)
        await pick(pilot, screen, "lisbon")
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, NameScreen))
        assert await dialog_error(pilot, "lisboa") == ""
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen")
        await pilot.press("enter")  # the focused answer is Cancel
        await until(pilot, lambda: app.screen is screen)
        listed = await daemon.call("memory.entities", {})
        assert {e["name"] for e in listed["entities"]} == {"lisbon", "lisboa", "joana", "porto"}


async def test_the_tab_follows_the_daemon(daemon: Daemon) -> None:
    await seed(daemon)
    async with inspector(daemon) as (_app, pilot, screen):
        await entities_tab(pilot, screen, 4)
        kyoto = await add(daemon, "wants to see Kyoto in autumn")  # another client writes
        await until(pilot, lambda: "kyoto  1×" in rows(screen))
        await daemon.call("memory.merge_entities", {"args": ["lisbon", "lisboa"]})
        await until(pilot, lambda: "lisbon  2×  also lisboa" in rows(screen))
        await daemon.call("memory.forget", {"args": [kyoto["id"]]})
        await until(pilot, lambda: not any(r.startswith("kyoto") for r in rows(screen)))
        # The search box filters the names.
        screen.query_one("#search", Input).value = "boa"
        await until(pilot, lambda: rows(screen) == ["lisbon  2×  also lisboa"])
        screen.query_one("#search", Input).value = "zzz"
        await until(pilot, lambda: rows(screen) == ["No entity has a name that contains this."])
        screen.query_one("#search", Input).value = "z" * 201
        await until(pilot, lambda: rows(screen)[0].startswith("A search among entities"))
        assert "at most 200 characters, and this one has 201" in rows(screen)[0]
