"""`navi chat` on a profile kept on a memory server that does not answer: the turn goes on
and is kept on this machine until the server is back, and the CLI says so (it said nothing:
the user believed the chat was on the server, where another machine would find it). A real
daemon, the real CLI as a subprocess, the fake Ollama, a server address nothing listens on."""

from __future__ import annotations

from tests.daemon_home import Home, navi_home
from tests.fake_ollama import Reply


def server_away(h: Home) -> None:
    """Profiles on a memory server at an address nothing listens on; the model answers."""
    config = h.home / "config" / "config.toml"
    config.write_text(config.read_text() + 'backend = "postgres"\n')
    h.environ["NAVI_PG_DSN"] = "postgresql://navi@127.0.0.1:9/navi"
    h.fake.script(Reply("Noted."))


def test_a_chat_kept_here_while_the_server_is_away_says_so() -> None:
    with navi_home() as h:
        server_away(h)
        done = h.navi("chat", "remember my bike is blue")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "Noted.\n"
        said, session = done.stderr.splitlines()
        assert said.startswith("navi: ") and "127.0.0.1:9" in said
        assert said.endswith("2 messages kept on this machine until it is back"), said
        assert session.startswith("session ")
        assert len(list(h.home.rglob("outbox.db"))) == 1


def test_a_damaged_outbox_is_the_profiles_line_in_the_daemons_status() -> None:
    """It stopped `navi daemon status` whole (exit 2) with the outbox's line."""
    with navi_home() as h:
        server_away(h)
        assert h.navi("chat", "remember my bike is blue").returncode == 0
        [outbox] = h.home.rglob("outbox.db")
        outbox.write_bytes(b"garbage" * 1000)
        status = h.navi("daemon", "status")
        assert status.returncode == 0, status.stderr
        assert f"the outbox {outbox} is damaged" in status.stdout
        assert outbox.read_bytes() == b"garbage" * 1000  # left as it was, for the user
