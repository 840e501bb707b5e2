"""The inspector's live reload stays cheap: a burst of memory changes makes one reload, and a
reload keeps the rows that did not change (the list does not measure them again)."""

from __future__ import annotations

import asyncio

from navi_desktop.tui.inspector import screen as inspector_screen
from tests.test_tui_inspector import add, inspector, rows, seed, settled
from tests.tui_support import Daemon, until


async def test_a_burst_of_memory_changes_makes_one_reload(daemon: Daemon, monkeypatch) -> None:
    fetches = 0
    fetch = inspector_screen.fetch

    async def counted(*args, **kwargs):
        nonlocal fetches
        fetches += 1
        return await fetch(*args, **kwargs)

    monkeypatch.setattr(inspector_screen, "fetch", counted)
    async with inspector(daemon) as (app, pilot, screen):
        await until(pilot, lambda: settled(app) and fetches)
        before = fetches
        await asyncio.gather(
            *(
                add(daemon, f"likes thing {n}", category="other", key=f"thing {n}")
                for n in range(10)
            )
        )
        await until(pilot, lambda: len(screen.memory_list.memories) == 10)
        await pilot.pause(0.5)
        assert len(screen.memory_list.memories) == 10
        assert fetches - before <= 3, fetches - before  # one per change before


async def test_a_reload_keeps_the_rows_that_did_not_change(daemon: Daemon) -> None:
    tea = (await seed(daemon))["tea"]
    async with inspector(daemon) as (app, pilot, screen):
        await until(pilot, lambda: len(rows(screen, "facts")) == 7 and settled(app))
        memory_list = screen.memory_list
        before = {option.id: option for option in memory_list.options}
        await daemon.call("memory.edit", {"args": [tea["id"]], "kwargs": {"value": "green tea"}})
        await until(pilot, lambda: "  drink: green tea" in rows(screen, "facts"))
        after = {option.id: option for option in memory_list.options}
        assert after.keys() == before.keys()
        changed = [key for key in after if after[key] is not before[key]]
        assert changed == [str(tea["id"])]
        # A change the list does not show (here: none at all) leaves it as it is.
        screen.reload()
        await until(pilot, lambda: settled(app))
        assert list(memory_list.options) == list(after.values())
