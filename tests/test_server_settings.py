"""Choosing where memory lives: ``[memory] backend`` and ``dsn`` (checked, the password never
shown back), the CLI on a server profile, and ``forget --compact``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from navi_desktop.config import parse_settings


def test_backend_and_dsn_are_checked_and_a_password_is_never_shown():
    settings, errors = parse_settings(
        {"memory": {"backend": "postgres", "dsn": "mysql://navi:s3cret@db/navi"}}
    )
    assert settings.memory.backend == "postgres" and settings.memory.dsn is None
    [error] = errors
    assert error.key == "memory.dsn" and "postgresql://" in str(error)
    assert "s3cret" not in str(error)
    _, errors = parse_settings({"memory": {"backend": "mysql"}})
    assert [e.key for e in errors] == ["memory.backend"]


def test_the_file_names_the_server_before_the_environment():
    settings, errors = parse_settings({"memory": {"dsn": "postgresql://a@file/navi"}})
    assert errors == []
    env = {"NAVI_PG_DSN": "postgresql://b@env/navi"}
    assert settings.memory.effective_dsn(env) == "postgresql://a@file/navi"
    unset, _ = parse_settings({"memory": {"dsn": ""}})  # empty: the variable's
    assert unset.memory.effective_dsn(env) == "postgresql://b@env/navi"
    assert unset.memory.effective_dsn({}) is None


def test_the_cli_on_a_server_profile_with_no_server_named_is_one_line(home, cli, monkeypatch):
    monkeypatch.delenv("NAVI_PG_DSN", raising=False)
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "config.toml").write_text('[memory]\nbackend = "postgres"\n')
    code, out, err = cli("list")
    assert code != 0 and out == ""
    assert err.count("\n") == 1 and "NAVI_PG_DSN" in err and "navi memory server start" in err
    assert not (home / "data" / "profiles").exists()  # no local file made instead


def test_the_cli_works_on_the_server(home, cli, pg_dsn):
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "config.toml").write_text(
        f'[memory]\nbackend = "postgres"\ndsn = "{pg_dsn}"\n'
    )
    code, out, err = cli("--json", "add", "editor", "helix", profile="srv-cli")
    assert code == 0, err
    code, out, _ = cli("--json", "list", profile="srv-cli")
    assert [m["value"] for m in json.loads(out)["memories"]] == ["helix"]
    assert not (home / "data" / "profiles").exists()


def test_forget_compact_rewrites_the_file_without_the_text(home, cli):
    secret = "locker code 4711-ZEBRA"
    code, out, err = cli("--json", "add", "locker", secret)
    assert code == 0, err
    memory_id = json.loads(out)["memory"]["id"]
    code, out, err = cli("forget", str(memory_id), "--yes", "--compact")
    assert code == 0, err
    assert "Compacted:" in out
    folder = home / "data" / "profiles" / "alice"
    for path in folder.iterdir():
        if path.is_file():
            assert b"ZEBRA" not in path.read_bytes(), path


def test_stats_on_the_server_name_it_and_how_substrings_are_found(home, cli, pg_dsn):
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "config.toml").write_text(
        f'[memory]\nbackend = "postgres"\ndsn = "{pg_dsn}"\n'
    )
    code, out, err = cli("stats", profile="srv-stats")
    assert code == 0, err
    assert "Server" in out and "profile srv-stats" in out
    assert "Substrings  pg_trgm" in out or "Substrings  ILIKE (pg_trgm not installed)" in out


def test_file_tools_on_a_server_profile_say_what_to_use_instead(home, cli, monkeypatch):
    monkeypatch.setenv("NAVI_PG_DSN", "postgresql://navi@127.0.0.1:9/navi")
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "config.toml").write_text('[memory]\nbackend = "postgres"\n')
    for command in (["doctor"], ["backup"], ["restore", "x.db", "--yes"]):
        code, _, err = cli(*command)
        assert code != 0 and err.count("\n") == 1, (command, err)
        assert "memory server" in err and "pg_dump" in err and "migrate --to sqlite" in err
    assert not (home / "data").exists()


def test_the_local_server_starts_is_used_and_stops_without_noise(tmp_path):
    """``navi memory server start --use|status|stop`` as a user runs them: a fresh process
    without XDG_RUNTIME_DIR (pgserver's import warned about it on every command)."""
    pytest.importorskip("pgserver")
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env |= {"NAVI_HOME": str(tmp_path), "NAVI_DAEMON": "off", "NAVI_EMBEDDER": "none"}

    def navi(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "navi_desktop", "memory", *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)

    started = navi("server", "start", "--use")
    try:
        assert started.returncode == 0 and started.stderr == "", started.stderr
        assert "memory server running: postgresql://" in started.stdout
        assert 'backend = "postgres"' in (tmp_path / "config" / "config.toml").read_text()
        added = navi("add", "editor", "helix")
        assert added.returncode == 0 and added.stderr == "", added.stderr
        listed = navi("--json", "list")
        assert [m["value"] for m in json.loads(listed.stdout)["memories"]] == ["helix"]
        status = navi("server", "status")
        assert status.returncode == 0 and status.stderr == ""
    finally:
        stopped = navi("server", "stop")
    assert stopped.returncode == 0 and stopped.stderr == "", stopped.stderr
    assert "memory server stopped" in stopped.stdout
    after = navi("--json", "server", "status")
    assert after.returncode == 1 and json.loads(after.stdout)["state"] == "stopped"
    folder = Path(json.loads(after.stdout)["folder"])
    if folder.is_relative_to("/var/lib/navi-desktop"):  # root's servers live outside tmp_path
        shutil.rmtree(folder)


@pytest.mark.parametrize(
    ("dsn", "said"),
    [
        ("garbage", 'scheme is expected to be either "postgresql" or "postgres"'),
        ("postgresql://127.0.0.1:99999/navi", "port must be 0-65535"),
        ("postgresql://127.0.0.1:9/navi?sslmode=bogus", "`sslmode` parameter must be one of"),
        ("postgresql://u:secret@[::1/navi", "Invalid IPv6 URL"),
    ],
)
def test_a_dsn_no_server_can_be_reached_by_is_named_as_the_dsns_fault(
    cli, home, monkeypatch, dsn, said
):
    """asyncpg's configuration errors are InterfaceErrors too: they read as "closed the
    connection: retrying", which no retry mends."""
    pytest.importorskip("asyncpg")
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "config.toml").write_text('[memory]\nbackend = "postgres"\n')
    monkeypatch.setenv("NAVI_PG_DSN", dsn)
    code, _, err = cli("list")
    assert code == 1 and "is not valid (" in err and said in err, err
    assert err.rstrip().endswith("fix [memory] dsn or NAVI_PG_DSN") and "retrying" not in err
    assert "secret" not in err
