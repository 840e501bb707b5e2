"""A look at a profile that has no file, on the file itself (no daemon), creates nothing: a
typo in ``--profile`` must not become a profile. The daemon's side: test_daemon_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

READS = [
    ("list",),
    ("search", "tea"),
    ("export",),
    ("export", "--format", "markdown"),
    ("stats",),
    ("entities",),
]
NAMED = [  # about something in the profile: not there, so said at once
    (("entity", "Bob"), "no entity named 'Bob'"),
    (("entity", "Bob", "--rename", "Rob"), "no entity named 'Bob'"),
    (("entity", "Bob", "--merge", "Rob"), "no entity named 'Bob'"),
    (("show", "5"), "no memory with id 5"),
    (("forget", "5", "--yes"), "no memory with id 5"),
    (("pin", "5"), "no memory with id 5"),
]


def _everything(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*"))


def test_reading_a_profile_with_no_file_creates_nothing(cli, home):
    for args in READS:
        code, _out, err = cli(*args, profile="typo")
        assert code == 0, (args, err)
        assert err == "", (args, err)
    for args, said in NAMED:
        code, _out, err = cli(*args, profile="typo")
        assert code != 0 and said in err, (args, err)
    assert not (home / "data").exists(), _everything(home)
    assert _everything(home) in ([], ["run"])  # the empty store's folder went with it


def test_stats_of_a_profile_with_no_file_names_its_path(cli, home):
    code, out, _ = cli("stats", profile="typo")
    own = home / "data" / "profiles" / "typo" / "memory.db"
    assert code == 0 and f"{own} (none yet: made by the first memory saved)" in out
    code, out, _ = cli("stats", "--json", profile="typo")
    stats = json.loads(out)
    assert (stats["path"], stats["file_bytes"], stats["sessions"]) == (str(own), 0, 0)


def test_the_first_write_makes_the_profile_and_reads_then_see_it(cli, home):
    code, out, err = cli("add", "I drink green tea", profile="typo")
    assert code == 0, err
    assert (home / "data" / "profiles" / "typo" / "memory.db").is_file()
    code, out, _ = cli("search", "tea", profile="typo")
    assert code == 0 and "green tea" in out
    code, out, _ = cli("stats", profile="typo")
    assert "none yet" not in out and "Memories    1" in out


def test_a_link_where_the_profile_goes_is_not_read_past(cli, home, tmp_path_factory):
    """Something at the path (here a dangling link) is the profile's to open or refuse: the
    look does not answer "no memories" from an empty store over it."""
    folder = home / "data" / "profiles" / "typo"
    folder.mkdir(parents=True)
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "memory.db"
    (folder / "memory.db").symlink_to(elsewhere)
    code, out, err = cli("list", profile="typo")
    assert code != 0 and "link" in err and "No memories" not in out
    assert not elsewhere.exists()
