"""``navi memory import`` of hostile or broken files: one line naming the file and the problem,
exit code 2, and nothing imported (the profile's memories counted before and after)."""

from __future__ import annotations

import json

import pytest


def export(*memories: dict, **extra: object) -> str:
    return json.dumps({"format": "navi-memory", "version": 1, "memories": list(memories), **extra})


def memory(**fields: object) -> dict:
    return {"id": 1, "kind": "fact", "value": "likes tea", **fields}


DEEP = "[" * 100_000 + "]" * 100_000
CASES = {
    "100k-deep array": (DEEP, "nested too deeply"),
    "deep inside an export": (
        export(memory(history=json.loads("[" * 50 + "]" * 50))),
        "history entry #1 is not an object",
    ),
    "5000-digit number": (
        '{"format": "navi-memory", "version": 1, "memories": [{"id": ' + "7" * 5000 + "}]}",
        "a number of 5000 digits",
    ),
    "NaN": (
        '{"format": "navi-memory", "version": 1, "memories": [{"id": 1, "confidence": NaN}]}',
        "NaN is not a number JSON allows",
    ),
    "huge float": (
        '{"format": "navi-memory", "version": 1, "memories": [{"id": 1, "strength": 1e999}]}',
        "too large",
    ),
    "list as subject": (export(memory(subject=["a"])), '"subject" must be a string'),
    "string as pinned": (export(memory(pinned="yes")), '"pinned" must be true or false'),
    "bool as mentions": (export(memory(mentions=True)), '"mentions" must be an integer'),
    "number as old": (export(memory(history=[{"old": 5}])), '"old" must be an object'),
    "session without id": (export(memory(), sessions=[{"title": "x"}]), '"id" must be a non-empty'),
    "id past 64 bits": (export(memory(id=2**63)), '"id" must be an integer'),
    "not UTF-8": (b"\xff\xfe\x00garbage", "not UTF-8 text"),
    "value past the size": (
        export(memory(value="v" * 20_001)),
        "memory #1: a memory's text is at most 20,000 characters",
    ),
    "key past the size": (export(memory(key="k" * 501)), "memory #1: its key is at most 500"),
}


def count(cli) -> int:
    code, out, err = cli("--json", "list", "--status", "all")
    assert code == 0, err
    return json.loads(out)["total"]


@pytest.mark.parametrize(("content", "words"), list(CASES.values()), ids=list(CASES))
def test_a_bad_import_file_is_one_line_exit_2_and_imports_nothing(cli, tmp_path, content, words):
    assert cli("add", "drink", "coffee")[0] == 0
    before = count(cli)
    bad = tmp_path / "bad.json"
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content)
    code, out, err = cli("import", str(bad))
    lines = err.strip().splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"navi: {bad}") and words in lines[0], lines[0]
    assert count(cli) == before


def test_a_good_file_still_imports(cli, tmp_path):
    good = tmp_path / "good.json"
    good.write_text(export(memory(history=[{"action": "create", "actor": "user", "new": {}}])))
    code, out, err = cli("import", str(good))
    assert code == 0, err and "1 added" in out
