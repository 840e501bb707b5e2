"""Bad parameters against a real daemon process on its real socket: every one gets -32602
(or the domain's not-found, -32001) with one line naming the parameter, and changes nothing.

Frames are written by hand (``json.dumps`` escapes a lone surrogate as ``\\ud800``, which is
valid JSON that no client library would send)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from navi_desktop.daemon import memory_api, memory_params
from navi_desktop.daemon.main import socket_path
from navi_desktop.daemon.params import model_of
from navi_desktop.paths import Paths
from tests.daemon_home import navi
from tests.daemon_support import make_service
from tests.fake_ollama import ThreadedFakeOllama
from tests.pipeline_helpers import MODELS

BIG = 10**30
CONFIG = '# kept as it is\n[ollama]\nchat_model = "llama3.2"\n[memory]\nembedder = "none"\n'


class Raw:
    """One connection to the daemon, speaking the wire format directly."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(os.fspath(path))
        self.file = self.sock.makefile("rb")
        self.next_id = 0

    def send_text(self, frame: str) -> dict[str, Any]:
        self.next_id += 1
        self.sock.sendall(frame.replace("@ID@", str(self.next_id)).encode() + b"\n")
        while True:
            reply = json.loads(self.file.readline())
            # A frame that cannot be parsed is answered with "id": null.
            if ("error" in reply and reply.get("id") is None) or reply.get("id") == self.next_id:
                return reply

    def call(self, method: str, params: Any = None) -> dict[str, Any]:
        """The reply to a request, ``params`` written with ``json.dumps`` (ASCII escapes)."""
        body = "" if params is None else f',"params":{json.dumps(params)}'
        return self.send_text(f'{{"jsonrpc":"2.0","id":@ID@,"method":"{method}"{body}}}')

    def result(self, method: str, params: Any = None) -> Any:
        reply = self.call(method, params)
        assert "result" in reply, reply
        return reply["result"]

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@dataclass
class Daemon:
    home: Path
    raw: Raw
    memory_id: int
    session_id: str

    @property
    def config(self) -> Path:
        return self.home / "config" / "config.toml"

    @property
    def log(self) -> Path:
        return self.home / "state" / "daemon.log"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    fake = ThreadedFakeOllama(MODELS).start()
    home = tmp_path_factory.mktemp("params") / "h"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text(CONFIG)
    environ = {**os.environ, "NAVI_HOME": str(home), "OLLAMA_HOST": fake.url}
    started = navi(environ, "daemon", "start")
    assert started.returncode == 0, started.stderr
    raw = Raw(socket_path(Paths.from_env(environ)))
    try:
        added = raw.result(
            "memory.add", {"args": ["tea"], "kwargs": {"key": "drink", "category": "preferences"}}
        )
        session = raw.result("sessions.create", {"title": "Kept title"})
        yield Daemon(home, raw, added["memory"]["id"], session["id"])
    finally:
        raw.close()
        navi(environ, "daemon", "stop")
        fake.stop()


def mem(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


MID = "@MEMORY@"  # stands for the id of the memory the fixture added
SID = "@SESSION@"  # and for its session

# (method, params, what the message must name). -32602 unless the name is a NotFound's id.
CASES: list[tuple[str, Any, str]] = [
    # memory.*: ids
    ("memory.get", mem("a"), "memory_id"),
    ("memory.get", mem(BIG), "memory_id"),
    ("memory.get", mem(True), "memory_id"),
    ("memory.get", mem(-1), "memory_id"),
    ("memory.get", mem(1.5), "memory_id"),
    ("memory.history", mem(["a"]), "memory_id"),
    ("memory.forget", mem("1"), "memory_id"),
    ("memory.forget", mem(MID, scope="all"), "scope"),
    ("memory.used", mem(True), "message_id"),
    # memory.*: the call's own shape
    ("memory.get", {"args": "1"}, "args"),
    ("memory.get", {"args": [1], "kwargs": []}, "kwargs"),
    ("memory.get", mem(1, 2), "args"),
    ("memory.get", {"args": [1], "profile": 5}, "profile"),
    ("memory.get", {"args": [1], "profile": "../../etc"}, "profile"),
    ("memory.get", {"args": [1], "extra": True}, "extra"),
    # memory.add
    ("memory.add", mem("\ud800"), "value"),
    ("memory.add", mem(["a"]), "value"),
    ("memory.add", mem("   "), "value"),
    ("memory.add", mem("x" * 20_001), "value"),
    ("memory.add", mem("v", session_id="nosuchsession"), "nosuchsession"),
    ("memory.add", mem("v", session_id=["a"]), "session_id"),
    ("memory.add", mem("v", session_id=SID, message_from="x"), "message_from"),
    ("memory.add", mem("v", session_id=SID, message_from=987654), "987654"),
    ("memory.add", mem("v", pinned="yes"), "pinned"),
    ("memory.add", mem("v", pinned=1), "pinned"),
    ("memory.add", mem("v", confidence=2), "confidence"),
    ("memory.add", mem("v", confidence="1"), "confidence"),
    ("memory.add", mem("v", kind="fcat"), "kind"),
    ("memory.add", mem("v", category=5), "category"),
    ("memory.add", mem("v", subject="a\udfff"), "subject"),
    ("memory.add", mem("v", at="yesterday"), "at"),
    ("memory.add", mem("v", colour="red"), "colour"),
    ("memory.add", mem("v", actor="extraction"), "actor"),
    # memory.edit / correct / pin
    ("memory.edit", mem(MID, value=["a"]), "value"),
    ("memory.edit", mem(MID, value=None), "value"),
    ("memory.edit", mem(MID, confidence="0.5"), "confidence"),
    ("memory.edit", mem(MID, category="food"), "category"),
    ("memory.edit", mem(MID, status="archived"), "status"),
    ("memory.correct", mem(MID, 42), "value"),
    ("memory.pin", mem(MID, "yes"), "pinned"),
    # memory.list / search
    ("memory.list", mem(limit=BIG), "limit"),
    ("memory.list", mem(limit=-5), "limit"),
    ("memory.list", mem(limit="10"), "limit"),
    ("memory.list", mem(offset=-1), "offset"),
    ("memory.list", mem(pinned="yes"), "pinned"),
    ("memory.list", mem(status="gone"), "status"),
    ("memory.list", mem(sort=["updated"]), "sort"),
    ("memory.search", mem(5), "query"),
    ("memory.search", mem("q" * 10_001), "query"),
    ("memory.search", mem("tea", kinds="fact"), "kinds"),
    ("memory.search", mem("tea", kinds=["fact", 5]), "kinds[1]"),
    ("memory.search", mem("tea", limit=0), "limit"),
    ("memory.search", mem("tea", since="last week"), "since"),
    ("memory.search", mem("tea", include_inactive="no"), "include_inactive"),
    # memory.import: the file is typed to its leaves, and nothing of it lands
    (
        "memory.import",
        mem(
            {
                "format": "navi-memory",
                "version": 1,
                "memories": [
                    {"id": 1, "kind": "fact", "value": "imported one"},
                    {"id": 2, "kind": "fact", "value": "imported two", "pinned": "yes"},
                ],
            }
        ),
        "data.memories[1].pinned",
    ),
    ("memory.import", mem({"format": "navi-memory", "version": 1, "memories": {}}), "memories"),
    ("memory.export", mem(include_inactive="yes"), "include_inactive"),
    # chat.*
    ("chat.send", {"text": ["a"]}, "text"),
    ("chat.send", {"text": "\ud800 hello"}, "text"),
    ("chat.send", {"text": "   "}, "text"),
    ("chat.send", {}, "text"),
    ("chat.send", {"text": "hi", "session_id": ["a"]}, "session_id"),
    ("chat.send", {"text": "hi", "incognito": "yes"}, "incognito"),
    ("chat.send", {"txt": "hi"}, "txt"),
    ("chat.send", {"text": "hi", "session_id": "nosuchsession"}, "nosuchsession"),
    ("chat.regenerate", {"session_id": 5}, "session_id"),
    ("chat.cancel", {"session_id": None}, "session_id"),
    # sessions.*
    ("sessions.list", {"limit": BIG}, "limit"),
    ("sessions.list", {"limit": 0}, "limit"),
    ("sessions.list", {"limit": True}, "limit"),
    ("sessions.show", {"id": ["a"]}, "id"),
    ("sessions.show", {"id": "nosuchsession"}, "nosuchsession"),
    ("sessions.rename", {"id": SID, "title": 5}, "title"),
    ("sessions.rename", {"id": SID, "title": "new \udc80"}, "title"),
    ("sessions.delete", {"id": None}, "id"),
    ("sessions.export", {"id": 5}, "id"),
    ("sessions.end", {}, "id"),
    ("sessions.end", {"all": "yes"}, "all"),
    ("sessions.create", {"title": ["a"]}, "title"),
    ("sessions.create", {"incognito": "no"}, "incognito"),
    ("sessions.keep", {"id": 5}, "id"),
    # settings.*, daemon.*, rpc.*, ollama.*
    ("settings.set", {"changes": "ui.theme=x"}, "changes"),
    ("settings.set", {"changes": {}}, "changes"),
    ("settings.set", {"changes": {"ui.theme": "dark\ud800"}}, "ui.theme"),
    ("settings.set", {"changes": {"memory.budget_tokens": "800"}}, "memory.budget_tokens"),
    ("settings.set", {"changes": {"memory.budget_tokens": BIG}}, "memory.budget_tokens"),
    ("settings.set", {"change": {"ui.theme": "x"}}, "change"),
    ("settings.get", {"verbose": True}, "verbose"),
    ("daemon.status", {"verbose": True}, "verbose"),
    ("daemon.stop", {"now": True}, "now"),  # refused, so the daemon keeps running
    ("rpc.subscribe", {"topics": "memory"}, "topics"),
    ("rpc.subscribe", {"topics": [5]}, "topics"),
    ("ollama.pull", {"model": 5}, "model"),
    ("ollama.test", {"host": ["a"]}, "host"),
    # Hosts the client cannot parse were "internal error"; a port past 65535 was dropped.
    ("ollama.test", {"host": "http://[::1"}, "host"),
    ("ollama.test", {"host": "http://[zz]:1"}, "host"),
    ("ollama.models", {"host": "http://[::1"}, "host"),
    ("ollama.test", {"host": "http://a:99999"}, "host"),
    ("ollama.models", {"host": "http://a:-1"}, "host"),
]


def _fill(value: Any, d: Daemon) -> Any:
    if value == MID:
        return d.memory_id
    if value == SID:
        return d.session_id
    if isinstance(value, list):
        return [_fill(v, d) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, d) for k, v in value.items()}
    return value


def _check(reply: dict[str, Any], name: str) -> str:
    assert "error" in reply, reply
    error = reply["error"]
    message = error["message"]
    assert error["code"] in (-32602, -32001), error
    assert name in message, error
    assert "\n" not in message and "pydantic" not in message.lower(), message
    assert "Input should be" not in message and "internal error" not in message, message
    return message


@pytest.mark.parametrize(("method", "params", "name"), CASES, ids=lambda v: str(v)[:40])
def test_a_bad_parameter_is_named(daemon: Daemon, method: str, params: Any, name: str) -> None:
    _check(daemon.raw.call(method, _fill(params, daemon)), name)


def test_the_table_covers_every_kind_of_method() -> None:
    assert len(CASES) >= 36
    assert {m.split(".")[0] for m, _, _ in CASES} >= {
        "memory",
        "chat",
        "sessions",
        "settings",
        "daemon",
        "rpc",
        "ollama",
    }


def test_unknown_ids_are_not_found(daemon: Daemon) -> None:
    reply = daemon.raw.call("memory.add", mem("v", session_id="nosuchsession"))
    assert reply["error"]["code"] == -32001
    assert reply["error"]["message"] == "no session with id 'nosuchsession'"
    reply = daemon.raw.call(
        "memory.add", mem("v", session_id=daemon.session_id, message_from=987654)
    )
    assert reply["error"]["code"] == -32001 and "987654" in reply["error"]["message"]


def test_messages_say_what_the_value_must_be(daemon: Daemon) -> None:
    def message(method: str, params: Any) -> str:
        return daemon.raw.call(method, params)["error"]["message"]

    assert message("memory.list", mem(limit=BIG)) == (
        f"parameter 'limit' must be an integer from 1 to 10000, got integer {BIG}"
    )
    assert message("memory.edit", mem(daemon.memory_id, value=["a"])) == (
        "parameter 'value' must be a string of 1 to 20,000 characters, got array [\"a\"]"
    )
    assert message("memory.add", mem("v", pinned="yes")) == (
        "parameter 'pinned' must be true or false, got string \"yes\""
    )
    assert message("chat.send", {"text": "ab\ud800"}) == (
        "parameter 'text' must be valid Unicode text: it holds a lone surrogate at character 2"
    )
    assert message("memory.list", mem(sortt="id")).startswith(
        "unknown parameter 'sortt'; did you mean 'sort'? (expected: kind, category, status,"
    )


def test_a_file_path_may_be_any_bytes_but_not_half_a_character_or_nul(daemon: Daemon) -> None:
    """A path's bytes that are not UTF-8 come as lone surrogates from \\udc80 to \\udcff
    (os.fsdecode); only a path may hold them. Other lone surrogates are no file's name."""

    def message(path: str) -> str:
        return daemon.raw.call("memory.import_file", mem(path))["error"]["message"]

    missing = os.fsdecode(b"/nowhere/caf\xe9.json")
    assert message(missing).startswith("cannot read /nowhere/caf")  # accepted: not there
    assert message("/a\ud800") == (
        "parameter 'path' must be valid Unicode text: it holds a lone surrogate at character 2"
    )
    assert message("/a\x00b").startswith("parameter 'path' must be a file path of 1 to 4,096")
    assert message("").startswith("parameter 'path' must be a file path of 1 to 4,096")


def test_a_number_out_of_range_never_reaches_the_handler(daemon: Daemon) -> None:
    """1e400 is valid JSON, but no float: refused as a parse error or as the parameter."""

    def send(method: str, params: str) -> dict[str, Any]:
        return daemon.raw.send_text(
            f'{{"jsonrpc":"2.0","id":@ID@,"method":"{method}","params":{params}}}'
        )

    reply = send("memory.add", '{"args":["v"],"kwargs":{"confidence":1e400}}')
    assert reply["error"]["code"] in (-32602, -32700), reply
    if reply["error"]["code"] == -32602:
        assert "confidence" in reply["error"]["message"]
    reply = send("settings.set", '{"changes":{"memory.budget_tokens":-1e400}}')
    assert reply["error"]["code"] in (-32602, -32700), reply


def test_bad_calls_wrote_nothing(daemon: Daemon) -> None:
    raw = daemon.raw
    before_config = daemon.config.read_bytes()
    for method, params, name in CASES:
        _check(raw.call(method, _fill(params, daemon)), name)
    memory = raw.result("memory.get", mem(daemon.memory_id))
    assert (memory["value"], memory["category"], memory["confidence"]) == ("tea", "preferences", 1)
    assert memory["status"] == "active" and memory["pinned"] is False
    assert [e["action"] for e in raw.result("memory.history", mem(daemon.memory_id))] == ["create"]
    listed = raw.result("memory.list", mem(status=None))
    assert [m["value"] for m in listed["memories"]] == ["tea"]  # nothing added, nothing imported
    sessions = raw.result("sessions.list", {})
    assert [(s["id"], s["title"]) for s in sessions] == [(daemon.session_id, "Kept title")]
    assert daemon.config.read_bytes() == before_config
    assert raw.result("rpc.subscribe", {"topics": []}) == {"topics": []}
    assert raw.result("rpc.ping") == {"pong": True}  # daemon.stop with a bad parameter did not stop
    log = daemon.log.read_text()
    assert "Traceback" not in log and "internal error" not in log, log[-2000:]


def test_an_export_imports_through_the_daemon(daemon: Daemon) -> None:
    """The typed export file accepts what the daemon itself exports: versions, history,
    sessions, pins."""
    raw = daemon.raw

    def call(method: str, *args: Any, profile: str = "rt-src", **kwargs: Any) -> Any:
        return raw.result(method, {"profile": profile, "args": list(args), "kwargs": kwargs})

    session = raw.result("sessions.create", {"profile": "rt-src", "title": "Trip"})
    first = call("memory.add", "Oslo", key="home city", category="profile")["memory"]
    call("memory.correct", first["id"], "Lisbon", evidence="I moved to Lisbon")
    rule = call("memory.add", "Answer briefly", kind="rule", session_id=session["id"])["memory"]
    call("memory.pin", rule["id"], True)
    call("memory.edit", rule["id"], evidence="said so twice", confidence=0.75)
    exported = call("memory.export")
    report = call("memory.import", exported, profile="rt-dst")
    assert (report["added"], report["skipped"], report["blocked"]) == (3, 0, 0)
    values = [m["value"] for m in call("memory.list", status=None, profile="rt-dst")["memories"]]
    assert sorted(values) == ["Answer briefly", "Lisbon", "Oslo"]


# -- every method declares its parameters -------------------------------------------------------


def test_every_registered_method_has_a_model(tmp_path: Path) -> None:
    async def broadcast(*args: Any) -> None:
        return None

    service = make_service(tmp_path, "http://127.0.0.1:9", broadcast)
    handlers = service.handlers()
    assert {name for name, h in handlers.items() if model_of(h) is None} == set()
    assert set(memory_params.MODELS) == set(memory_api.METHODS)


def test_a_memory_method_without_a_model_is_refused_at_registration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broadcast(*args: Any) -> None:
        return None

    monkeypatch.setitem(memory_api.METHODS, "memory.shiny", ("stats", lambda s: s, False))
    service = make_service(tmp_path, "http://127.0.0.1:9", broadcast)
    with pytest.raises(TypeError, match=r"memory\.shiny has no parameter model"):
        service.handlers()
