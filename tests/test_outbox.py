"""The outbox (memory/outbox.py) that keeps what a user typed while the memory server was away:
a file that cannot be used (a planted link, a folder, garbage, a full disk) is one line naming
it and the fix, the message is not acknowledged, and nothing already kept is lost."""

from __future__ import annotations

import os

import pytest
import sqlean

from navi_desktop.errors import DiskFull, NaviError, StorageUnavailable
from navi_desktop.memory.outbox import Outbox
from navi_desktop.memory.pg.buffered import BufferedStore


def one_line(exc: BaseException, *words: str) -> str:
    text = str(exc)
    assert isinstance(exc, NaviError), repr(exc)
    assert "\n" not in text
    for word in words:
        assert word in text, text
    return text


async def away() -> None:
    raise StorageUnavailable("memory server postgresql://x@h/navi is not reachable (refused)")


def server_away(outbox: Outbox) -> BufferedStore:
    return BufferedStore(away, outbox)  # type: ignore[arg-type]


async def test_messages_are_kept_in_order_and_the_file_goes_when_sent(tmp_path):
    box = Outbox(tmp_path / "me" / "outbox.db")
    assert await box.pending() == [] and not box.path.exists()  # nothing made to read it
    store = server_away(box)
    first = await store.save_message("s1", "user", "one")
    second = await store.save_message("s1", "user", "two")
    assert (first.id, second.id) == (-1, -2)
    assert [r["content"] for r in await box.pending()] == ["one", "two"]
    for row in await box.pending():
        await box.done(row["seq"])
    assert not box.path.exists()


async def test_a_planted_link_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("not yours")
    box = Outbox(tmp_path / "me" / "outbox.db")
    box.path.parent.mkdir()
    box.path.symlink_to(target)
    with pytest.raises(NaviError) as caught:
        await server_away(box).save_message("s1", "user", "my locker code is 4711")
    one_line(caught.value, str(box.path), "symbolic link", "remove the link")
    assert target.read_text() == "not yours"


async def test_a_dangling_link_is_not_taken_for_an_empty_outbox(tmp_path):
    box = Outbox(tmp_path / "outbox.db")
    box.path.symlink_to(tmp_path / "nowhere.db")
    with pytest.raises(NaviError) as caught:
        await box.pending()
    one_line(caught.value, "symbolic link")
    assert not (tmp_path / "nowhere.db").exists()


async def test_a_damaged_outbox_is_one_line_and_left_as_it_is(tmp_path):
    box = Outbox(tmp_path / "outbox.db")
    garbage = os.urandom(4096)
    box.path.write_bytes(garbage)
    with pytest.raises(NaviError) as caught:
        await server_away(box).save_message("s1", "user", "hello")
    text = one_line(caught.value, str(box.path), "damaged", "move it aside")
    assert "doctor" not in text  # the doctor checks memory files, not the outbox
    assert box.path.read_bytes() == garbage


async def test_a_folder_at_the_outbox_path_is_one_line(tmp_path):
    box = Outbox(tmp_path / "outbox.db")
    box.path.mkdir()
    with pytest.raises(NaviError) as caught:
        await server_away(box).save_message("s1", "user", "hello")
    one_line(caught.value, str(box.path), "folder")


class SmallDisk(Outbox):
    """An outbox whose file cannot grow (SQLite answers SQLITE_FULL, as on a full disk)."""

    def _connect(self) -> sqlean.Connection:
        conn = super()._connect()
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn


async def test_a_full_disk_keeps_what_was_acknowledged(tmp_path):
    await Outbox(tmp_path / "outbox.db").add("message", "s1", role="user", content="kept", at="x")
    box = SmallDisk(tmp_path / "outbox.db")
    with pytest.raises(DiskFull) as caught:
        await server_away(box).save_message("s1", "user", "x" * 100_000)
    one_line(caught.value, "disk full", "free some space")
    assert [r["content"] for r in await box.pending()] == ["kept"]
