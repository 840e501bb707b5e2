"""A link in the profile's folder is never taken for a copy of it. Before, a forget's scrub
followed `backups/manual-<time>.db -> /elsewhere/outside.db` and rewrote (and chmodded 600) a
file outside NAVI_HOME; a link stamped in the future was counted as a backup as well."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import time
from pathlib import Path

from navi_desktop.memory.backup import backup_files, list_backups, make_backup, unusable
from tests.copies_support import add_a_secret, holds
from tests.test_doctor_backup import db

SECRET = "zorbquux"
YEAR = 365 * 24 * 3600


def outside_copy(home: Path, tmp_path: Path) -> Path:
    """A real copy of the profile, outside NAVI_HOME, readable by others: a forget that
    followed a link to it would scrub and chmod it."""
    outside = tmp_path.parent / f"{tmp_path.name}-outside.db"
    make_backup(db(home), outside)
    outside.chmod(0o644)
    return outside


def test_a_forget_never_follows_a_link_out_of_the_profile_s_folder(cli, home, tmp_path, caplog):
    memory_id = asyncio.run(add_a_secret(db(home), SECRET))
    made = make_backup(db(home)).path
    outside = outside_copy(home, tmp_path)
    before = outside.read_bytes()
    backups = made.parent
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() + 60))
    ahead = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() + YEAR))
    links = [
        backups / f"manual-{stamp}.db",
        backups / f"daily-{ahead}.db",  # stamped in the future: it was counted too
        db(home).with_name("memory.before-restore-20200101T000000Z.db"),  # a restore's side copy
    ]
    for link in links:
        link.symlink_to(outside)

    with caplog.at_level(logging.WARNING):
        code, out, err = cli("--json", "forget", str(memory_id), "--yes")
    assert code == 0, err
    assert outside.read_bytes() == before and holds(outside, SECRET)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644
    assert json.loads(out)["backups"] == 1  # the real backup only
    assert all(link.is_symlink() for link in links)  # left alone, not removed either
    assert not holds(made, SECRET)
    assert list_backups(db(home)) == [made] and backup_files(db(home)) == [made]
    link = "a link, not a backup Navi made"
    assert dict(unusable(db(home))) == {links[0]: link, links[1]: link}  # for the doctor
    said = [
        r.getMessage()
        for r in caplog.records
        if "not a backup Navi made: skipped" in r.getMessage()
    ]
    assert len([s for s in said if str(links[0]) in s]) == 1, said  # named once
    os.unlink(outside)
