"""A file whose name is near the longest its folder takes (255 bytes) can be exported to.

An export is written beside its file under a temporary name, then renamed over it; that name
was the file's own with 26 bytes more (`.NAME.navi-export-XXXXXXXX.tmp`), so a name of 230 to
255 bytes was refused as "File name too long", though the file itself could be made. Now the
temporary name is built from the file's name cut short where it must be, and one still too
long for the folder is said of the file the user named. The same holds for the other files
written whole through a temporary one (settings, a backup to a path of the user's).

Real `navi` processes on a real profile file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from navi_desktop.fileio import write_private_atomic
from tests import export_support
from tests.daemon_home import navi

# The fixtures, found by pytest by their names.
environ = export_support.environ
folder = export_support.folder

# 250 bytes: "m" * 245 + ".json"; 253 bytes, cut at a character: "é" (2 bytes) * 124 + ".json"
NAMES = ["m" * 245 + ".json", "é" * 124 + ".json"]


@pytest.mark.parametrize("name", NAMES, ids=["250-bytes", "253-bytes-multibyte"])
def test_an_export_to_a_name_near_the_longest_is_written(
    environ: dict[str, str], folder: Path, name: str
) -> None:
    target = folder / name
    done = navi(environ, "memory", "export", "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert len(json.loads(target.read_text())["memories"]) == 2
    assert os.listdir(folder) == [name]  # no temporary file left


def test_what_a_killed_export_to_such_a_name_left_is_removed(
    environ: dict[str, str], folder: Path
) -> None:
    left = folder / f".{'m' * 229}.navi-export-abcd_123.tmp"  # 255 bytes, its name cut
    left.write_text("the vault code is zorbquux")
    done = navi(environ, "memory", "export", "-o", str(folder / NAMES[0]))
    assert done.returncode == 0, done.stderr
    assert f"removed {left}, left by a stopped export" in done.stderr
    assert not left.exists()


def test_a_name_too_long_for_the_folder_is_said_of_the_file(
    environ: dict[str, str], folder: Path
) -> None:
    target = folder / ("m" * 251 + ".json")  # 256 bytes
    done = navi(environ, "memory", "export", "-o", str(target))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"cannot write {target}: its name is 256 bytes" in done.stderr
    assert "give a shorter name" in done.stderr
    assert os.listdir(folder) == []


def test_a_file_written_whole_may_have_a_name_near_the_longest(folder: Path) -> None:
    target = folder / ("c" * 250)  # as a setting's file or a screenshot
    write_private_atomic(target, "saved\n")
    assert target.read_text() == "saved\n" and os.listdir(folder) == [target.name]


def test_a_backup_to_a_name_near_the_longest_is_written(
    environ: dict[str, str], folder: Path
) -> None:
    target = folder / ("b" * 247 + ".db")  # 250 bytes
    done = navi(environ, "memory", "backup", "--to", str(target))
    assert done.returncode == 0, done.stderr
    assert os.listdir(folder) == [target.name]
