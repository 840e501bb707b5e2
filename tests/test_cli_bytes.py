"""Bytes that are not UTF-8 at the command line: text arguments are refused in one line
before anything is done; file names may be any bytes and are printed back as they are, even
where stdout is strict (a UTF-8 locale other than C.UTF-8)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD = "caf\udce9"  # how Python holds the argument b"caf\xe9"


@pytest.mark.parametrize(
    "args",
    [
        ("add", BAD),
        ("add", "--category", BAD, "tea"),
        ("search", BAD),
        ("entity", BAD),
        ("list", "--category", BAD),
    ],
)
def test_a_text_argument_that_is_not_utf8_is_one_line_and_nothing_is_done(cli, home, args):
    code, out, err = cli(*args)
    assert code == 2 and out == ""
    assert (
        err == "navi: an argument is not UTF-8 text: 'caf\\xe9'; check the terminal's"
        " encoding (locale), or what passed it\n"
    )
    assert not (home / "data").exists()


def _navi(home: Path, *args: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "NAVI_HOME": str(home),
        "NAVI_DAEMON": "off",
        "NAVI_EMBEDDER": "none",
        "PYTHONIOENCODING": "utf-8:strict",  # as in en_US.UTF-8
    }
    argv = [os.fsencode(sys.executable), b"-m", b"navi_desktop", b"memory", *args]
    return subprocess.run(argv, env=env, capture_output=True, timeout=60)


def test_a_file_name_that_is_not_utf8_is_written_and_printed_as_its_bytes(tmp_path):
    home = tmp_path / "home"
    assert _navi(home, b"add", b"I drink tea").returncode == 0
    target = os.fsencode(tmp_path) + b"/caf\xe9.json"
    done = _navi(home, b"export", b"-o", target)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"Exported 1 memory (json) to " + target + b".\n"
    assert os.path.exists(target)
    done = _navi(home, b"--json", b"export", b"-o", target)
    assert done.returncode == 0, done.stderr
    assert os.fsencode(json.loads(done.stdout)["path"]) == target  # JSON's escapes read back
    done = _navi(home, b"--profile", b"other", b"import", target)
    assert done.returncode == 0 and b"1 added" in done.stdout, done.stderr


def test_an_export_with_half_a_character_is_refused_naming_where(cli, home, tmp_path):
    assert cli("add", "I drink tea")[0] == 0
    path = tmp_path / "e.json"
    assert cli("export", "-o", str(path))[0] == 0
    path.write_text(path.read_text().replace("I drink tea", "I drink \\udce9 tea"))
    code, _, err = cli("import", str(path), profile="other")
    assert code == 2 and f"{path}: not valid text at memories[0].value" in err
    assert "lone surrogate" in err and "\n" not in err.rstrip("\n")
    assert not (home / "data" / "profiles" / "other").exists()


def test_a_home_whose_name_is_not_utf8_works_through_the_daemon():
    """A home folder named in Latin-1: every path the daemon opens, sends or is sent holds
    bytes that are not UTF-8. It failed as "internal error" on the first memory saved."""
    from navi_desktop.cli.transfer import INLINE_BYTES
    from tests.daemon_home import navi_home

    with navi_home(name=os.fsdecode(b"h\xe9")) as h:

        def navi(*args: str) -> subprocess.CompletedProcess[bytes]:
            argv = [sys.executable, "-m", "navi_desktop", *args]
            done = subprocess.run(argv, env=h.environ, capture_output=True, timeout=60)
            assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
            return done

        navi("memory", "add", "I drink green tea")
        own = h.paths.profile_db("tester")
        stats = json.loads(navi("memory", "--json", "stats").stdout)
        assert stats["path"] == str(own) and stats["memories"]["fact"] == {"active": 1}
        assert os.fsencode(own) in navi("memory", "stats").stdout  # its bytes, as ls shows
        navi("chat", "hello there")
        # An export over a request's size is read by the daemon from its path.
        big = h.home / "big.json"
        memories = [
            {"id": i, "kind": "fact", "value": f"fact {i} " + "x" * 400, "source": "import"}
            for i in range(1, INLINE_BYTES // 400 + 2)
        ]
        document = {"format": "navi-memory", "version": 1, "sessions": [], "memories": memories}
        big.write_text(json.dumps(document))
        assert big.stat().st_size > INLINE_BYTES
        assert f"{len(memories)} added".encode() in navi("memory", "import", str(big)).stdout
        navi("memory", "backup")
        backup = next((own.parent / "backups").glob("manual-*.db"))
        navi("memory", "restore", "--yes", str(backup))
        assert json.loads(navi("memory", "--json", "stats").stdout)["path"] == str(own)
        assert "internal error" not in h.log_text()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["chat", "-"], '"-" reads the message from standard input, which is a terminal here'),
        (["memory", "import", "-"], '"-" reads the export from standard input, which is a'),
    ],
)
def test_a_dash_at_a_terminal_says_what_it_means(home, capsys, monkeypatch, argv, said):
    """`navi chat -` at a terminal sent "-" as the message; `navi memory import -` waited,
    silent, for an export to be typed in."""
    from navi_desktop.cli.main import run

    monkeypatch.setattr(sys, "stdin", Terminal(""))
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"navi: {said}") and err.count("\n") == 1
    assert not (home / "data").exists()
