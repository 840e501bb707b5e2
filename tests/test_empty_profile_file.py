"""An empty (0-byte) profile file beside backups that hold memories is refused, not taken
for a new profile.

A file emptied by a crash or by hand (`: > memory.db`) was opened as a new, empty memory:
`navi memory list` said "No memories.", new work went into it, and the daily backups then
rotated the good ones out within days. Navi itself makes a new file empty before SQLite
writes it, so an empty file with no such backup is still a new profile.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from navi_desktop.errors import ProfileDamaged
from navi_desktop.memory.backup import make_backup
from navi_desktop.memory.salvage import recover
from navi_desktop.memory.store import MemoryStore
from navi_desktop.paths import Paths
from tests.daemon_home import navi
from tests.writer_support import killed, values


async def test_an_emptied_file_is_refused_only_beside_backups_that_hold_memories(
    tmp_path: Path,
) -> None:
    environ = {**os.environ, "NAVI_HOME": str(tmp_path), "NAVI_DAEMON": "off"}
    path = Paths.from_env(environ).profile_db("me")
    path.parent.mkdir(parents=True)
    path.touch(0o600)
    assert await values(path) == []  # no backups: a new profile
    make_backup(path)  # one that holds no memories
    path.write_bytes(b"")
    async with await MemoryStore.open(path) as store:  # still a new one
        await store.add_memory("likes tea")
        await store.add_memory("lives in Lyon")
    latest = make_backup(path).path

    path.write_bytes(b"")  # `: > memory.db`
    for read_only in (False, True):
        with pytest.raises(ProfileDamaged) as err:
            await MemoryStore.open(path, read_only=read_only)
        message = str(err.value)
        assert "\n" not in message and str(path) in message
        assert "is empty (0 bytes), and its backups hold memories; it was left untouched" in message
        assert message.endswith(f"restore the latest: `navi memory restore {latest} --profile me`")
    assert path.read_bytes() == b""
    assert sorted(p.name for p in path.parent.iterdir()) == ["backups", "memory.db"]

    done = navi(environ, "memory", "restore", str(latest), "--profile", "me", "--yes")
    assert done.returncode == 0, done.stderr  # the fix the message gives
    assert await values(path) == ["likes tea", "lives in Lyon"]
    recovered = await recover(path)  # its new file is made empty beside those backups too
    assert recovered.copied["memories"] == 2

    path.unlink()  # starting afresh, beside those backups
    killed(path, "a fresh start")  # before the first checkpoint: its log holds most of it
    assert await values(path) == ["a fresh start"]
