"""``navi chat``: one chat turn through the daemon, or a rating of a reply (--rate)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from typing import Any

from navi_desktop.cli.daemon_cmds import connect_daemon, rpc_params
from navi_desktop.cli.main import CommandError
from navi_desktop.cli.output import OutputError, emit_json, error, safe
from navi_desktop.errors import CorruptDatabase, InvalidInput, NaviError

CHAT_TIMEOUT_S = 600.0
OUTPUT_GONE_S = 2.0  # a chat whose output cannot be written: how long its turn may go on


def register(commands: Any) -> None:
    p = commands.add_parser(
        "chat",
        help="one chat turn; the reply streams to stdout",
        description="Send one message; the reply streams to stdout and the"
        " session id goes to stderr.",
    )
    p.add_argument(
        "message",
        metavar="MESSAGE",
        nargs="?",
        help="what to say; left out (or -), it is read from standard input when that is piped",
    )
    p.add_argument("--session", metavar="ID", help="continue this session")
    p.add_argument(
        "--rate",
        choices=("up", "down"),
        help="rate a reply instead of sending (the session's last one; --session: which"
        " session, default the latest)",
    )
    p.add_argument("--reply", metavar="ID", type=int, help="with --rate: the reply's message id")
    p.add_argument("--note", metavar="TEXT", help="with --rate: why")
    p.add_argument("--incognito", action="store_true", help="remember nothing of this chat")
    p.add_argument("--profile", metavar="NAME", help="whose memory (default: your user name)")
    p.add_argument("--json", action="store_true", help="print the result as JSON when done")
    p.set_defaults(handler=cmd_chat, help_parser=p)


def cmd_chat(args: argparse.Namespace) -> int:
    if args.rate:
        return _rate(args)
    if args.reply is not None or args.note is not None:
        error("--reply and --note go with --rate up|down")
        return 2
    if args.message == "-" and sys.stdin.isatty():  # it would be sent as "-"
        error(
            '"-" reads the message from standard input, which is a terminal here: pipe it in'
            ' (echo hi | navi chat -), or write the message in quotes, as in navi chat "hello"'
        )
        return 2
    if args.message in (None, "-") and not sys.stdin.isatty():  # echo hi | navi chat
        args.message = _read_stdin()
        if args.message is None:
            return 2
    if not (args.message or "").strip():
        error('nothing to send: the message is empty; write it in quotes, as in navi chat "hello"')
        return 2
    params = rpc_params(
        args, text=args.message, session_id=args.session, incognito=True if args.incognito else None
    )

    streaming: dict[str, str] = {}  # the session a reply streams in, once one does
    result: dict[str, Any] = {}  # the turn, once the daemon answered it
    asked: list[bool] = []  # once the message is on its way
    line_open: list[bool] = []  # a part of the reply is out, its line not ended

    async def main() -> None:
        client = await connect_daemon("`navi chat`")
        if os.environ.get("OLLAMA_HOST"):  # this shell's host may not be the daemon's
            from navi_desktop.ollama_host import host_note

            note = host_note(await client.call("settings.get", {}))
            if note:
                print(f"navi: {note}", file=sys.stderr)

        async def show_deltas() -> None:
            async for note in client.notifications():
                if note.method != "chat.delta":
                    continue
                streaming.setdefault("session", str(note.params.get("session_id")))
                if not args.json:
                    line_open.clear()  # until this part is out
                    sys.stdout.write(safe(note.params["text"]))  # the model's: no escapes
                    sys.stdout.flush()
                    line_open.append(True)

        printer = asyncio.ensure_future(show_deltas())
        asked.append(True)
        call = asyncio.ensure_future(client.call("chat.send", params, timeout=CHAT_TIMEOUT_S))
        try:
            await asyncio.wait({call, printer}, return_when=asyncio.FIRST_COMPLETED)
            failed = printer.done() and not printer.cancelled() and printer.exception()
            if failed and not call.done():
                # Nobody sees the rest: the turn may end by itself a moment longer (its own
                # failure, the model's, is the news then), else it stops and keeps what came
                # (it ran on to its end, 10 minutes for a stuck model).
                await asyncio.wait({call}, timeout=OUTPUT_GONE_S)
                if not call.done():
                    raise failed
            result.update(await call)
        finally:
            call.cancel()
            await client.close()  # ends the notifications after the ones already received
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                try:
                    await asyncio.wait_for(printer, 2.0)
                except OutputError:
                    if call.done() and not call.cancelled() and call.exception() is None:
                        raise  # answered: the output's failure is the news

    try:
        asyncio.run(main())
        if args.json:
            emit_json(result)
        else:
            sys.stdout.write("\n")
        sys.stdout.flush()  # here, not at exit: a failed write is said with the session
    except KeyboardInterrupt:  # the daemon stops the reply and keeps what came (a "^C" alone)
        sys.stdout.write("\n")
        session = streaming.get("session") or args.session
        if args.incognito or _incognito_id(session):  # also one continued by its --session
            where = f" (incognito session {session})" if session else ""
            error(f"stopped (Ctrl+C): nothing of this chat is saved{where}")
            return 130
        where = f" in session {session}" if session else ""
        came = "what came of the reply is kept" if streaming else "your message is kept"
        error(f"stopped (Ctrl+C): {came}{where}")
        return 130
    except NaviError as exc:
        if not asked:  # nothing was sent: said as any command's failure
            raise
        if line_open:
            sys.stdout.write("\n")  # the part of the reply shown ends its line
        code = 2 if isinstance(exc, InvalidInput | CorruptDatabase) else 1
        fate = _message_fate(exc, streaming, args)
        raise CommandError(f"{str(exc).rstrip('.')}; {fate}", code) from None
    except OutputError as exc:  # `navi chat > /dev/full`: the daemon kept the turn all the same
        session = streaming.get("session") or result.get("session_id") or args.session
        incognito = bool(result.get("incognito") or args.incognito or _incognito_id(session))
        exc.kept = _kept_in(session, incognito, args)
        raise
    if result.get("cut"):
        print(
            "(the reply was cut at its length limit: raise ollama.reply_max_tokens for longer"
            " ones)",
            file=sys.stderr,
        )
    if isinstance(result.get("waiting"), str):  # kept here: the memory server is away
        error(safe(result["waiting"]))
    if result.get("cancelled"):  # `navi daemon stop`, SIGTERM, or another client's cancel
        kept = " (what came is kept in the session)" if result.get("reply_message_id") else ""
        error(f"the reply was stopped before its end{kept}")
    label = "incognito session" if result.get("incognito") else "session"
    print(f"{label} {result['session_id']}", file=sys.stderr)
    return 1 if result.get("cancelled") else 0  # a partial reply is not a whole one


def _incognito_id(session: str | None) -> bool:
    from navi_desktop.daemon.wire import INCOGNITO_PREFIX

    return bool(session and session.startswith(INCOGNITO_PREFIX))


def _message_fate(exc: NaviError, streaming: dict[str, str], args: argparse.Namespace) -> str:
    """Whether the daemon kept the message of a send that failed with ``exc``
    (``message_kept``, as the app reads it), in words that tell the user whether to send
    it again."""
    from navi_desktop.daemon.client import RpcCallError, message_kept
    from navi_desktop.paths import profile_flag

    told = exc.data if isinstance(exc, RpcCallError) and isinstance(exc.data, dict) else {}
    session = told.get("session_id") or streaming.get("session") or args.session
    session = session if isinstance(session, str) else None
    incognito = bool(args.incognito or _incognito_id(session))
    stored = message_kept(exc, heard=bool(streaming))
    flag = profile_flag(args.profile)
    if stored is False:
        return "your message was not saved"
    if incognito:  # it lives in the daemon only: gone with it, if that is what went away
        if told.get("stored") is True:  # told by a daemon still there
            return f"your message is kept in incognito session {session}, in the daemon only"
        return "your message may not have been kept (incognito: in the daemon only)"
    if stored is None:
        see = f"navi sessions show {session}{flag}" if session else f"navi sessions list{flag}"
        return f"your message may not have been saved: see `{see}` once the daemon is back"
    return (
        f"your message was saved in session {session}: open it in the app (`navi{flag}`) and"
        " press Ctrl+R for its answer rather than send it again"
    )


def _kept_in(session: str | None, incognito: bool, args: argparse.Namespace) -> str:
    """Where a chat whose output was lost is kept, and how to see it ('' when unknown)."""
    from navi_desktop.paths import profile_flag

    if not session:
        return ""
    if incognito:
        return f"and the incognito conversation is not saved (session {session})"
    show = f"navi sessions show {session}{profile_flag(args.profile)}"
    return f"and the conversation is kept in session {session} (see it: `{show}`)"


def _read_stdin() -> str | None:
    """The message piped in, or None when it cannot be sent (said in one line): read no
    further than the longest message the daemon takes."""
    from navi_desktop.limits import MAX_CHAT_TEXT

    data = sys.stdin.buffer.read(4 * MAX_CHAT_TEXT + 4)  # UTF-8: at most 4 bytes a character
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        error(f"the message on standard input is not UTF-8 text (byte {exc.start}); send text")
        return None
    if len(text) > MAX_CHAT_TEXT or (len(data) > 4 * MAX_CHAT_TEXT):
        error(
            f"the message on standard input is over {MAX_CHAT_TEXT:,} characters; send a"
            " shorter one"
        )
        return None
    return text


def _rate(args: argparse.Namespace) -> int:
    if args.message:
        error("--rate rates a reply and sends nothing: leave out the message")
        return 2
    if args.incognito and args.session is None:  # the latest listed is a stored session
        error(
            "--rate --incognito needs --session ID, the id `navi chat --incognito` printed:"
            " incognito sessions are never listed"
        )
        return 2

    async def main() -> Any:
        async with await connect_daemon() as client:
            session = args.session
            if session is None:
                latest = await client.call("sessions.list", rpc_params(args, limit=1))
                if not latest:
                    return None
                session = latest[0]["id"]
            params = rpc_params(
                args,
                session_id=session,
                message_id=args.reply,
                rating=args.rate,
                note=args.note,
                incognito=True if args.incognito else None,
            )
            return await client.call("chat.rate", params)

    result = asyncio.run(main())
    if result is None:
        error("no session to rate yet: chat first (navi chat MESSAGE)")
        return 1
    if args.json:
        emit_json(result)
        return 0
    what = "turn" if result.get("incognito") else "reply"
    print(f"Rated {what} {result['message_id']} of session {result['session_id']}: {args.rate}")
    return 0
