"""A host variable that holds no host (OLLAMA_HOST="http://[::1", a port past 65535, a
control character): the ``ollama`` package raised on it as it was imported, and every chat
failed as "internal error". Now such a value is set aside, said by every client, and the
default host is used."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from navi_desktop.ollama_host import (
    DEFAULT_HOST,
    env_embedding_host,
    env_host_problems,
    resolve_host,
)
from tests.daemon_home import navi_home

BAD = ["http://[::1", "http://host:99999", "http://x:-1", "http://x\x01y:1", "ftp://x", "a b"]


@pytest.mark.parametrize("value", BAD)
def test_a_host_variable_that_is_no_host_is_set_aside_and_named(value: str) -> None:
    env = {"OLLAMA_HOST": value, "NAVI_EMBEDDING_HOST": value}
    assert resolve_host(None, env) == DEFAULT_HOST
    assert env_embedding_host(env) is None  # the chat host embeds
    chat, embedding = env_host_problems(env)
    assert chat.startswith(f"OLLAMA_HOST={value!r} is not a host")
    assert f"{DEFAULT_HOST} is used instead; fix or unset it" in chat
    assert embedding.startswith(f"NAVI_EMBEDDING_HOST={value!r}")
    assert "the chat host embeds instead" in embedding


def test_a_host_that_cannot_be_parsed_is_one_clear_error_not_a_crash() -> None:
    from navi_desktop.errors import InvalidInput

    with pytest.raises(InvalidInput, match=r"'http://\[::1' is not a host: .*host:port"):
        resolve_host("http://[::1", environ={})


def test_good_hosts_are_used_and_not_named() -> None:
    env = {"OLLAMA_HOST": "127.0.0.1:11500", "NAVI_EMBEDDING_HOST": "https://gpu.lan"}
    assert resolve_host(None, env) == "http://127.0.0.1:11500"
    assert env_embedding_host(env) == "https://gpu.lan:443"
    assert env_host_problems(env) == []


def test_the_llm_layer_imports_with_such_a_value() -> None:
    """The ``ollama`` package makes a client from OLLAMA_HOST when it is imported."""
    env = {**os.environ, "OLLAMA_HOST": "http://[::1"}
    code = "import navi_desktop.llm.backend, os; print(os.environ.get('OLLAMA_HOST'))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"  # set aside in this process only


def test_chat_with_such_a_value_is_one_line_and_the_status_names_it() -> None:
    with navi_home() as h:
        env = {**h.environ, "OLLAMA_HOST": "http://[::1"}
        done = h.navi("chat", "hello", environ=env)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and "internal error" not in done.stderr
        assert lines[0].startswith("navi: warning: OLLAMA_HOST='http://[::1' is not a host")
        assert lines[-1].startswith(f"navi: cannot reach Ollama at {DEFAULT_HOST}")
        status = h.navi("daemon", "status", environ=env).stdout
        assert "environment  OLLAMA_HOST='http://[::1' is not a host" in status
        assert "internal error" not in h.log_text() and "Traceback" not in h.log_text()


def test_the_app_shows_the_daemons_line_in_its_banner() -> None:
    from navi_desktop.tui.status import Status, daemon_fields

    problem = env_host_problems({"OLLAMA_HOST": "http://[::1"})[0]
    fields = daemon_fields({"env_errors": [problem], "ollama": {"reachable": True}}, None, "me")
    assert problem in Status(daemon="up", **fields).problems()
