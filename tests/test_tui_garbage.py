"""Full garbage collections while the app runs: survivors frozen, so the collection after a
reply walks what came since, not the whole transcript; cyclic garbage among frozen objects
still goes, at the next thorough collection; nothing stays frozen once the app is gone."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from navi_desktop.tui import garbage
from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.garbage import FullCollections, full_collections
from tests.tui_support import SIZE, tracked, until


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collections() -> Iterator[FullCollections]:
    fc = FullCollections()
    try:
        yield fc
    finally:
        fc.stop()  # whatever a test froze is Python's to collect again


def test_what_outlives_a_collection_is_frozen_while_the_app_runs(collections):
    collections.start()
    kept = Node()
    assert tracked(kept)
    collections.collect()
    assert not tracked(kept)  # the next full collection does not walk it
    collections.stop()
    assert tracked(kept)
    assert gc.get_freeze_count() == 0


async def test_cyclic_garbage_among_frozen_objects_goes_at_the_thorough_collection(
    collections, monkeypatch
):
    monkeypatch.setattr(garbage, "IDLE_S", 0.05)
    collections.start()
    node = Node()
    collections.collect()  # frozen while alive
    gone = weakref.ref(node)
    del node  # now cyclic garbage, but frozen
    collections.collect()
    await asyncio.sleep(0.1)
    assert gone() is not None  # a thorough collection is not due yet
    monkeypatch.setattr(garbage, "THOROUGH_S", 0.0)
    collections.collect()
    assert gone() is not None  # due: it waits for a pause
    await asyncio.sleep(0.1)
    assert gone() is None


async def test_the_thorough_collection_waits_while_the_user_types(collections, monkeypatch):
    """It walks the whole app (~0.5-0.8 s after a few long replies): not under the user's
    fingers, not while a reply streams. The user's clock is the test's, so a slow machine
    cannot make a pause between keys."""
    clock = [1000.0]
    monkeypatch.setattr(garbage, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(garbage, "IDLE_S", 0.05)
    monkeypatch.setattr(garbage, "THOROUGH_S", 0.0)
    collections.start()
    node = Node()
    collections.collect()
    gone = weakref.ref(node)
    del node
    collections.touch()
    collections.collect()  # due
    for _ in range(8):  # keys keep coming, never IDLE_S apart on the user's clock
        await asyncio.sleep(0.05)
        clock[0] += 0.01
        collections.touch()
    assert gone() is not None
    clock[0] += 10.0  # the user stops typing, but a reply streams
    collections.hold()
    await asyncio.sleep(0.3)
    assert gone() is not None
    collections.streams = 0  # it ends (release, without its timer)
    collections.settle()
    for _ in range(100):
        if gone() is None:
            break
        await asyncio.sleep(0.05)
    assert gone() is None


def test_without_the_app_a_collection_freezes_nothing(collections):
    node = Node()
    gone = weakref.ref(node)
    del node
    collections.collect()
    assert gone() is None
    assert gc.get_freeze_count() == 0


def test_a_reply_starting_freezes_what_is_there(collections):
    collections.start()
    kept = Node()
    collections.hold()
    try:
        assert not tracked(kept)
        assert gc.get_threshold()[2] > 1_000_000  # no full collection while it streams
    finally:
        collections.streams = 0  # the reply ends (release, without its timer)
        collections.settle()
    assert gc.get_threshold()[2] < 1_000_000


def test_a_sealed_part_freezes_what_survives_a_young_collection(collections):
    """The collection after the reply will not walk the sealed part; young garbage is
    collected then, not frozen with it."""
    collections.start()
    collections.hold()
    try:
        kept, dropped = Node(), Node()
        gone = weakref.ref(dropped)
        del dropped
        collections.part_sealed()
        assert tracked(kept)  # not before Python's own next young collection
        gc.collect(1)
        assert not tracked(kept)
        assert gone() is None
        again = Node()
        gc.collect(1)
        assert tracked(again)  # once a part
    finally:
        collections.streams = 0
        collections.settle()


def test_a_sealed_part_freezes_nothing_when_no_reply_holds_collections(collections):
    kept = Node()
    collections.part_sealed()  # the app is not running
    gc.collect(1)
    assert tracked(kept)
    collections.start()
    kept = Node()
    collections.part_sealed()  # no reply streams: Python collects as usual
    gc.collect(1)
    assert tracked(kept)


def test_python_s_collections_are_left_alone_once_the_app_is_gone(collections):
    collections.start()
    collections.hold()
    collections.part_sealed()
    collections.stop()
    kept = Node()
    gc.collect(1)
    assert tracked(kept)
    assert gc.get_freeze_count() == 0
    collections.streams = 0
    collections.settle()


async def test_keys_in_the_app_put_off_the_thorough_collection(daemon):
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.status.memories is not None)
        before = full_collections.active_at
        await pilot.press("h")
        assert full_collections.active_at > before


async def test_the_app_freezes_while_it_runs_and_thaws_when_it_quits(daemon):
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.status.memories is not None)
        assert full_collections.freezing
        assert gc.get_freeze_count() > 0
    assert not full_collections.freezing
    assert gc.get_freeze_count() == 0
