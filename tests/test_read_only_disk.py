"""The memory file on a file system that is read-only (mounted so, or remounted so by Linux
after a disk error). Before, the advice was to `chmod` the file, which cannot help, and the
profile stayed in that error state until the daemon restarted: now one line says the file
system is read-only, and the profile opens by itself once it is writable again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from navi_desktop.daemon.client import RpcCallError
from navi_desktop.memory.store import MemoryStore
from tests.test_disk_full import small_disk
from tests.tui_support import DEAD_HOST, Daemon, make_home


def remount(mount: Path, mode: str) -> None:
    done = subprocess.run(
        ["mount", "-o", f"remount,{mode}", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot remount {mount} {mode}: {done.stderr.strip()}")


async def test_a_read_only_file_system_is_named_and_the_profile_opens_once_writable(
    tmp_path: Path,
) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    with small_disk(paths.data, "32m") as data:  # the data folder is the small disk
        async with await MemoryStore.open(paths.profile_db("tester")) as store:
            await store.add_memory("likes tea")
        remount(data, "ro")
        daemon = await Daemon(paths).start()
        try:
            for _ in range(2):  # and again: not an error state that waits for a restart
                with pytest.raises(RpcCallError) as err:
                    await daemon.call("memory.add", {"args": ["likes rain"]})
                message = str(err.value)
                assert err.value.kind == "DiskError", message
                assert "file system is read-only" in message and "\n" not in message
                assert "chmod" not in message and "damaged" not in message
            remount(data, "rw")
            await daemon.call("memory.add", {"args": ["likes rain"]})
            listed = await daemon.call("memory.list")
            assert sorted(m["value"] for m in listed["memories"]) == ["likes rain", "likes tea"]
        finally:
            remount(data, "rw")
            await daemon.stop()
