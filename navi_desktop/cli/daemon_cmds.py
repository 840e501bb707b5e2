"""``navi daemon``, ``navi end`` and ``navi sessions``: clients of the daemon (``navi chat``
is in chat.py).

Each starts the daemon when no socket answers, then speaks JSON-RPC over its socket.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from navi_desktop.cli.output import emit_json, error, one_line, safe, say


def register(commands: Any) -> None:
    d = commands.add_parser("daemon", help="run, start, stop or inspect the background service")
    d.set_defaults(help_parser=d)
    sub = d.add_subparsers(title="daemon commands", metavar="COMMAND")
    for name, handler, text in (
        ("run", cmd_daemon_run, "run in the foreground (logs to stderr)"),
        ("start", cmd_daemon_start, "start in the background; returns when it answers"),
        ("stop", cmd_daemon_stop, "end open sessions, then stop"),
        ("status", cmd_daemon_status, "pid, socket, uptime, Ollama, sessions, pending work"),
    ):
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        p.set_defaults(handler=handler, help_parser=p)
        if name == "status":
            p.add_argument("--json", action="store_true", help="print JSON")

    from navi_desktop.cli import chat  # here: `navi --help` lists it after daemon

    chat.register(commands)

    p = commands.add_parser("end", help="end sessions now and report what was learned")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--session", metavar="ID")
    group.add_argument("--all", action="store_true", help="every session not yet processed")
    p.add_argument("--profile", metavar="NAME")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_end, help_parser=p)

    s = commands.add_parser("sessions", help="list, show, rename, delete or export sessions")
    s.set_defaults(help_parser=s)
    ssub = s.add_subparsers(title="sessions commands", metavar="COMMAND")
    for name, text in (
        ("list", "list sessions, most recent first"),
        ("show", "a session with its messages"),
        ("rename", "give a session a title"),
        ("delete", "delete a session and its messages"),
        ("export", "a session as Markdown"),
    ):
        sp = ssub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        if name != "list":
            sp.add_argument("id", metavar="ID")
        if name == "rename":
            sp.add_argument("title", metavar="TITLE")
        sp.add_argument("--profile", metavar="NAME")
        sp.add_argument("--json", action="store_true")
        sp.set_defaults(handler=cmd_sessions, action=name, help_parser=sp)


def _paths() -> Any:
    from navi_desktop.paths import Paths

    return Paths.from_env()


async def connect_daemon(what: str = "this command") -> Any:
    """A connected client; starts the daemon first when none answers, unless NAVI_DAEMON=off
    (then a daemon already running is used, and none is started)."""
    from navi_desktop.daemon.client import DaemonUnavailable
    from navi_desktop.daemon.main import connect

    if os.environ.get("NAVI_DAEMON", "on") != "off":
        return await connect(_paths())
    try:
        return await connect(_paths(), autostart=False)
    except DaemonUnavailable:
        # Before, it started one anyway, and a start that failed was said as if it mattered.
        raise DaemonUnavailable(
            f"{what} needs the daemon (sessions and chats live in it), which is not running,"
            " and NAVI_DAEMON=off keeps navi from starting it: start it with `navi daemon"
            " start`, or unset NAVI_DAEMON"
        ) from None


def _call(
    method: str, params: dict[str, Any], what: str = "this command", slow: str | None = None
) -> Any:
    """``method`` through the daemon; ``slow``: said once on stderr if it takes long."""

    async def main() -> Any:
        async with await connect_daemon(what) as client:
            if slow is not None:
                client.on_slow = lambda _: print(f"navi: {slow}", file=sys.stderr, flush=True)
            return await client.call(method, params)

    return asyncio.run(main())


def rpc_params(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """A call's parameters: those given (None left out), with --profile when set."""
    params = {k: v for k, v in extra.items() if v is not None}
    if getattr(args, "profile", None):
        params["profile"] = args.profile
    return params


def cmd_daemon_run(args: argparse.Namespace) -> int:
    from navi_desktop.daemon.main import run_foreground

    return run_foreground(_paths())


def cmd_daemon_start(args: argparse.Namespace) -> int:
    from navi_desktop.daemon.client import DaemonUnavailable
    from navi_desktop.daemon.main import call_when_back, socket_path, start_background

    paths = _paths()
    try:
        status = call_when_back(paths, "daemon.status", {}, timeout=5.0)
        print(f"already running (pid {status['pid']})")
        return 0
    except DaemonUnavailable:
        pid = start_background(paths)
    print(f"started (pid {pid}), listening on {socket_path(paths)}")
    return 0


def cmd_daemon_stop(args: argparse.Namespace) -> int:
    import time

    from navi_desktop.daemon.client import DaemonUnavailable, call_sync
    from navi_desktop.daemon.main import call_when_back, socket_path

    sock = socket_path(_paths())
    try:
        call_when_back(_paths(), "daemon.stop", {}, timeout=5.0)
    except DaemonUnavailable:
        print("not running")
        return 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # it ends open sessions first: wait for it to go
        try:
            call_sync(sock, "rpc.ping", {}, timeout=1.0)
        except DaemonUnavailable:
            print("stopped")
            return 0
        time.sleep(0.1)
    error("the daemon is still ending sessions after 60 s")
    return 1


def cmd_daemon_status(args: argparse.Namespace) -> int:
    from navi_desktop.daemon.client import DaemonUnavailable, RpcTimeout
    from navi_desktop.daemon.main import call_when_back, lock_holder, socket_path

    sock = socket_path(_paths())
    try:
        status = call_when_back(_paths(), "daemon.status", {}, timeout=15.0)
    except RpcTimeout:  # it runs (it took the call) but does not answer: not "not running"
        pid = lock_holder(_paths())
        if args.json:
            emit_json({"running": True, "answering": False, "pid": pid, "socket": str(sock)})
        else:  # the pid is unknown when the lock cannot be read
            who = f"pid {pid}, but" if pid else "but"
            resume = f" (`kill -CONT {pid}` resumes it)" if pid else ""
            say(
                f"running      {who} not answering within 15 s: busy (a large import)"
                f" or stopped{resume}"
            )
        return 4
    except DaemonUnavailable:
        if args.json:
            emit_json({"running": False, "socket": str(sock)})
        else:
            say(f"not running (socket {sock})")
        return 3
    status = {"running": True, "socket": str(sock)} | status
    if args.json:
        emit_json(status)
        return 0
    ollama = status["ollama"]
    state = "reachable" if ollama["reachable"] else f"unreachable: {ollama['error']}"
    say(f"running      pid {status['pid']}, up {status['uptime_s']:.0f} s")
    say(f"socket       {sock}")
    say(f"ollama       {ollama['host']} ({state})")
    if embedding := status.get("embedding_ollama"):  # a separate embedding host
        state = "reachable" if embedding["reachable"] else f"unreachable: {embedding['error']}"
        say(f"embeddings   {embedding['host']} ({state})")
    say(f"model        {status['chat_model']} (embeddings: {status['embedding_model']})")
    if server := status.get("memory_server"):  # memory kept on a PostgreSQL server
        say(f"memory       {server}")
    say(
        f"sessions     {status['open_sessions']} open,"
        f" {status['pending_extractions']} waiting to be processed"
    )
    if busy := status.get("busy_profiles"):
        say(f"busy         {', '.join(busy)}: writing (an import?), not counted above")
    for end in status.get("extracting") or []:
        where = f"chunk {end['chunk']} of {end['chunks']}" if end["chunks"] else "starting"
        if end["waiting"]:
            where += ", waiting for you to be idle"
        say(f"learning     session {end['session_id']} ({end['trigger']}): {where}")
    if status["last_failure"]:
        say(f"last failure {status['last_failure']}")
    for profile, problem in (status.get("embedding_problems") or {}).items():
        say(f"embeddings   {profile}: {problem}; what has no vector is found by its words")
    for profile, problem in (status.get("profile_errors") or {}).items():
        say(f"profile      {profile}: {problem['message']}")
    for problem in status.get("env_errors") or ():
        say(f"environment  {problem}")
    for problem in status.get("config_errors") or ():
        say(f"config       {problem}")
    return 0


def cmd_end(args: argparse.Namespace) -> int:
    params = rpc_params(args, id=args.session, all=True if args.all else None)
    slow = (
        "still learning from the session: the model takes long (a long session,"
        " or a model server that does not answer); Ctrl+C stops waiting, and a session not"
        " learned now is tried again later"
    )
    reports = _call("sessions.end", params, "`navi end`", slow)
    if args.json:
        emit_json(reports)
        return 0
    if not reports:
        say("Nothing to process.")
    for r in reports:
        learned = ", ".join(f"{len(ids)} {action}" for action, ids in r["learned"].items())
        if r["status"] == "pending":
            say(f"{r['session_id']}: not processed yet ({r['reason']}); it will be retried")
            if learned:
                say(f"  kept from the parts done: {learned}")
        else:
            say(f"{r['session_id']}: {r['status']}" + (f" — {learned}" if learned else ""))
        for line in _dropped_lines(r):
            say(line)
    # A script must see that not every session was processed (it is retried later).
    return 1 if any(r["status"] == "pending" for r in reports) else 0


def _dropped_lines(report: dict[str, Any]) -> list[str]:
    """What the session end left out, and why: candidates, then summary notes."""
    dropped = report.get("dropped") or []
    lines = []
    if dropped:
        offered = report.get("offered") or len(dropped)
        lines.append(f"  dropped {len(dropped)} of {max(offered, len(dropped))}:")
        lines += [f"    - {d}" for d in dropped]
    lines += [f"  {note}" for note in report.get("notes") or []]
    return lines


def cmd_sessions(args: argparse.Namespace) -> int:
    action = args.action
    params = rpc_params(args, id=getattr(args, "id", None), title=getattr(args, "title", None))
    result = _call(f"sessions.{action}", params, f"`navi sessions {action}`")
    if args.json:
        emit_json(result)
        return 0
    if action == "list":
        for s in result:
            name = s["title"] or (s.get("preview") or "").split("\n", 1)[0][:60]
            print(f"{s['id']}  {s['last_active_at'][:16]}  {s['state']:<8}  {one_line(name)}")
    elif action == "show":
        for m in result["messages"]:
            who = one_line(m["name"] or m["role"])
            print(f"[{m['created_at'][11:16]}] {who}: {safe(m['content'])}")
    elif action == "export":
        markdown = result["markdown"]  # to a file as written; to a terminal, no escapes
        sys.stdout.write((safe(markdown) if sys.stdout.isatty() else markdown) + "\n")
    elif action == "rename":
        print(f"renamed {result['id']}: {one_line(result['title'])}")
    elif action == "delete":
        print(f"deleted {result['deleted']} ({result['messages']} messages)")
    return 0
