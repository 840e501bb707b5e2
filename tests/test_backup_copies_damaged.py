"""A damaged profile is not backed up, and a damaged backup is never "the latest backup".
Before, `navi memory backup` copied a truncated or corrupted file and said it was done; that
copy then became the backup every damaged-file message told the user to restore, and its
restore failed ("database disk image is malformed")."""

from __future__ import annotations

import time
from pathlib import Path

from navi_desktop.memory.backup import (
    DAILY,
    backup_files,
    latest_backup,
    list_backups,
    make_backup,
    take_daily,
    unusable,
)
from tests.test_doctor_backup import db, fill
from tests.test_profile_errors import half

DAY = 24 * 3600


def flip_a_page(path: Path) -> None:
    """200 bytes in a middle page inverted, as a failing disk does: the header stays good."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    at = (len(data) // page // 2) * page
    data[at : at + 200] = bytes(b ^ 0xFF for b in data[at : at + 200])
    path.write_bytes(bytes(data))


def refused_with_nothing_left(cli, home: Path, why: str) -> None:
    code, out, err = cli("backup")
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "is damaged" in err and why in err and "no backup was made" in err
    assert "navi memory doctor --profile alice" in err  # the fix
    folder = db(home).parent / "backups"
    assert not (folder.exists() and list(folder.iterdir()))  # not even a temporary file


def test_a_truncated_profile_is_not_backed_up(cli, home):
    fill(home, 30)
    with db(home).open("r+b") as fh:  # `truncate -s 50 memory.db`
        fh.truncate(50)
    refused_with_nothing_left(cli, home, "truncated to 50 bytes")


def test_a_profile_damaged_inside_its_pages_is_not_backed_up(cli, home):
    fill(home, 30)
    flip_a_page(db(home))  # the header check passes: the copy's quick check finds it
    refused_with_nothing_left(cli, home, "SQLite's check of its copy")


def test_the_latest_backup_named_is_a_whole_one(cli, home):
    fill(home, 30)
    path = db(home)
    older = make_backup(path, now=time.time() - DAY).path
    newer = make_backup(path).path
    half(newer)  # the newest backup is itself damaged
    assert latest_backup(path) == older and list_backups(path) == [older]
    assert backup_files(path) == [newer, older]  # a forget still scrubs it
    ((named, why),) = unusable(path)  # for the doctor to name
    assert named == newer and why.startswith("damaged (truncated")

    half(path)
    code, _, err = cli("list")  # the damaged profile's advice names the whole backup
    assert code == 2 and f"navi memory restore {older} --profile alice" in err
    assert str(newer) not in err
    code, out, _ = cli("doctor")
    assert f"navi memory restore {older}" in out and f"navi memory restore {newer}" not in out
    # The damaged one is named on its own, with what to do about it.
    assert f"{newer.name}: damaged (truncated" in out and f"rm {newer}" in out


def test_a_damaged_daily_backup_does_not_count_as_today_s(home):
    fill(home, 30)
    path = db(home)
    start = time.time() - 3 * DAY
    first = take_daily(path, 2, now=start)
    assert first is not None
    half(first.path)
    again = take_daily(path, 2, now=start + 3600)  # before: "made an hour ago", none due
    assert again is not None and list_backups(path, DAILY) == [again.path]
    for n in (1, 2):  # the rotation keeps two whole ones; the damaged one rolls out
        assert take_daily(path, 2, now=start + n * DAY) is not None
    assert len(list_backups(path, DAILY)) == 2 and not first.path.exists()
