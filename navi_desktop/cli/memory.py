"""``navi memory``: look at and change what Navi remembers, by hand.

Each command checks its arguments, opens the profile's store once (``asyncio.run`` once per
command), always closes it, and prints either plain text or, with ``--json``, one JSON document.
The engine is imported inside the commands so that ``navi --help`` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from navi_desktop.cli.output import (
    emit_json,
    one_line,
    safe,
    table,
    terminal_width,
    truncate,
)
from navi_desktop.cli.profile_access import (
    check_choice,
    flags,
    key_label,
    kind_label,
    text_of,
    wants_json,
    with_store,
)
from navi_desktop.errors import InvalidInput
from navi_desktop.limits import MAX_QUERY, SEARCH, check_length, check_memory_fields

if TYPE_CHECKING:
    from navi_desktop.memory import MemoryStore

T = TypeVar("T")

SORTS = ("updated", "created", "strength", "confidence", "id")


# -- parser ------------------------------------------------------------------------------------


def register(commands: Any) -> None:
    # --profile and --json are accepted before or after the subcommand. SUPPRESS keeps a
    # subcommand's unset copy from overwriting a value given to the group.
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("memory options")
    group.add_argument(
        "--profile",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help="whose memory (default: your OS user name)",
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON document on stdout instead of text",
    )

    mem = commands.add_parser(
        "memory",
        parents=[common],
        help="look at and change what Navi remembers",
        description="Look at and change what Navi remembers about you.",
    )
    mem.set_defaults(help_parser=mem)
    sub = mem.add_subparsers(title="memory commands", metavar="COMMAND")

    def command(
        name: str, handler: Callable[[argparse.Namespace], int], help: str, **kw: Any
    ) -> argparse.ArgumentParser:
        description = help[0].upper() + help[1:] + "."
        p = sub.add_parser(name, parents=[common], help=help, description=description, **kw)
        p.set_defaults(handler=handler, help_parser=p)
        return p

    p = command(
        "add",
        cmd_add,
        "remember something you tell it",
        usage="navi memory add [-h] [--kind {fact,rule}] [--category C] [--subject S]\n"
        "                       [--evidence TEXT] [--confidence X] [--pin] [--expires WHEN]\n"
        "                       [KEY] VALUE",
    )
    p.add_argument(
        "text",
        nargs="+",
        metavar="[KEY] VALUE",
        help="the value, optionally after a key naming the attribute (e.g. editor vim);"
        " quote a value that has spaces",
    )
    p.add_argument(
        "--kind",
        choices=("fact", "rule"),
        default="fact",
        help="fact (default) or rule: how Navi should behave (a rule rarely needs a key)",
    )
    p.add_argument("--category", metavar="C", help="profile, preferences, technical, ...")
    p.add_argument("--subject", metavar="S", help="who or what it is about (default: you)")
    p.add_argument("--evidence", metavar="TEXT", help="where it comes from")
    p.add_argument("--confidence", type=float, default=1.0, metavar="X", help="0 to 1 (default 1)")
    p.add_argument("--pin", action="store_true", help="pin it: never decays or gets archived")
    p.add_argument(
        "--expires",
        metavar="WHEN",
        help="a fact that holds for a while: 7d, 2w, or a date (2025-06-30: through that day);"
        " then it leaves search and the prompt, and is archived",
    )

    p = command("list", cmd_list, "list memories")
    p.add_argument("--kind", help="fact, episode, rule or reflection")
    p.add_argument("--category", metavar="C")
    p.add_argument(
        "--status",
        default="active",
        help="active (default), held, archived, superseded, or all",
    )
    p.add_argument("--pinned", action="store_true", help="only pinned memories")
    p.add_argument("--sort", choices=SORTS, default="updated", help="order (default: updated)")
    p.add_argument("--asc", action="store_true", help="oldest / lowest first")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="page size (default 50)")
    p.add_argument("--offset", type=int, default=0, metavar="N", help="skip the first N")

    p = command("search", cmd_search, "search memories (and optionally the conversations)")
    p.add_argument("query", metavar="QUERY")
    p.add_argument(
        "--kind",
        action="append",
        metavar="KIND",
        help="fact, episode, rule, reflection or message (repeatable; default: every memory)",
    )
    p.add_argument("--category", action="append", metavar="C", help="repeatable")
    p.add_argument("--limit", type=int, default=10, metavar="N", help="hits (default 10)")
    p.add_argument("--since", metavar="TIME", help="created at or after (ISO 8601)")
    p.add_argument("--until", metavar="TIME", help="created at or before (ISO 8601)")
    p.add_argument(
        "--all",
        dest="include_inactive",
        action="store_true",
        help="include held, archived and superseded memories",
    )

    p = command("show", cmd_show, "show one memory with its earlier versions and history")
    p.add_argument("id", type=int, metavar="ID")

    from navi_desktop.cli import changes, doctor, forget, server, transfer  # doctor: backup

    changes.register(command)  # pin, confirm, edit
    forget.register(command)
    transfer.register(command)
    server.register(command)
    doctor.register(command)
    from navi_desktop.cli import entities  # entity NAME, entities

    entities.register(command)
    from navi_desktop.cli import migrate  # migrate --to postgres|sqlite

    migrate.register(command)


# -- add ---------------------------------------------------------------------------------------


def cmd_add(args: argparse.Namespace) -> int:
    from navi_desktop.expiry import parse_expires
    from navi_desktop.memory.models import CATEGORIES

    if len(args.text) > 2:
        raise InvalidInput(
            f"add takes [KEY] VALUE, got {len(args.text)} words: quote a value that has spaces"
        )
    key, value = (None, args.text[0]) if len(args.text) == 1 else args.text
    check_choice("category", args.category, CATEGORIES)
    if not value.strip():
        raise InvalidInput("a memory needs a non-empty value")
    if key is not None and not key.strip():
        raise InvalidInput("the key is empty: leave it out, or name the attribute")
    if not 0 <= args.confidence <= 1:
        raise InvalidInput(f"confidence must be between 0 and 1, got {args.confidence}")
    check_memory_fields(value=value, key=key, subject=args.subject, evidence=args.evidence)
    if args.expires is not None and args.kind != "fact":
        raise InvalidInput(
            f"--expires is for facts only: a {args.kind} stays until you change it;"
            " leave out --expires"
        )
    expires = parse_expires(args.expires, "--expires") if args.expires is not None else None

    async def work(store: MemoryStore):
        result = await store.add_memory(
            value,
            kind=args.kind,
            category=args.category,
            subject=args.subject or None,
            key=key,
            evidence=args.evidence or None,
            source="user_explicit",
            confidence=args.confidence,
            pinned=args.pin,
            expires_at=expires,
        )
        if args.pin and result.memory is not None and not result.memory.pinned:
            result.memory = await store.pin(result.memory.id)
        return result

    result = with_store(args, work)
    m = result.memory
    if wants_json(args):
        emit_json(
            {
                "action": result.action,
                "memory": m.to_dict() if m else None,
                "replaced": result.replaced,
            }
        )
        return 0
    if m is None:  # pragma: no cover - a user's own memory is never blocked
        print(f"Not added: {result.action}.")
        return 1
    verb = {"added": "Added", "strengthened": "Already known, strengthened", "superseded": "Added"}
    line = f"{verb.get(result.action, result.action)} #{m.id}: {one_line(text_of(m))}"
    if result.replaced:
        line += f" (replaces #{result.replaced})"
    if m.expires_at:
        from navi_desktop.expiry import describe

        line += f" [expires {describe(m.expires_at)}]"
    print(line + (" [pinned]" if m.pinned else ""))
    return 0


# -- list --------------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from navi_desktop.memory.models import CATEGORIES, KINDS, STATUSES

    check_choice("kind", args.kind, KINDS)
    check_choice("category", args.category, CATEGORIES)
    check_choice("status", args.status, (*STATUSES, "all"))
    if args.limit < 1 or args.offset < 0:
        raise InvalidInput("--limit must be at least 1 and --offset not negative")

    async def work(store: MemoryStore):
        return await store.list_memories(
            kind=args.kind,
            category=args.category,
            status=None if args.status == "all" else args.status,
            pinned=True if args.pinned else None,
            sort=args.sort,
            descending=not args.asc,
            limit=args.limit,
            offset=args.offset,
        )

    memories, total = with_store(args, work, reads=True)
    if wants_json(args):
        emit_json(
            {
                "total": total,
                "offset": args.offset,
                "limit": args.limit,
                "memories": [m.to_dict() for m in memories],
            }
        )
        return 0
    if not memories:
        print("No memories." if total == 0 else f"No memories past {args.offset} (of {total}).")
        return 0
    rows = [[f"#{m.id}", kind_label(m), key_label(m), flags(m), m.value] for m in memories]
    for line in table(["ID", "KIND", "KEY", "STATUS", "VALUE"], rows, flex=4):
        print(line)
    first, last = args.offset + 1, args.offset + len(memories)
    if first > 1 or last < total:
        more = f"; next page: --offset {last}" if last < total else ""
        print(f"({first}-{last} of {total}{more})")
    return 0


# -- search ------------------------------------------------------------------------------------


def _why(signals: dict[str, Any]) -> str:
    order = {"bm25": 0, "vector": 1, "entity": 2, "session": 3}
    names = sorted(signals, key=lambda n: (order.get(n, 9), n))

    def one(name: str) -> str:
        sig = signals[name]
        # a similarity means something to a reader; BM25 and fusion scores do not
        return (
            f"{name} #{sig.rank} ({sig.score:.2f})" if name == "vector" else f"{name} #{sig.rank}"
        )

    return " · ".join(one(n) for n in names)


def cmd_search(args: argparse.Namespace) -> int:
    from navi_desktop.memory.clock import check_iso
    from navi_desktop.memory.models import CATEGORIES, KINDS

    for kind in args.kind or ():
        check_choice("kind", kind, (*KINDS, "message"))
    for category in args.category or ():
        check_choice("category", category, CATEGORIES)
    if not 1 <= args.limit <= 1000:
        raise InvalidInput(f"--limit must be between 1 and 1000, got {args.limit}")
    check_length(args.query, MAX_QUERY, SEARCH)  # the daemon's line would name a parameter
    since = check_iso(args.since, "--since") if args.since else None
    until = check_iso(args.until, "--until") if args.until else None

    async def work(store: MemoryStore):
        return await store.search(
            args.query,
            limit=args.limit,
            kinds=args.kind,
            categories=args.category,
            since=since,
            until=until,
            include_inactive=args.include_inactive,
        )

    hits = with_store(args, work, reads=True)
    if wants_json(args):
        emit_json({"query": args.query, "hits": [h.to_dict() for h in hits]})
        return 0
    if not hits:
        print("No matches.")
        return 0
    width = terminal_width()
    for hit in hits:
        if hit.memory is not None:
            m = hit.memory
            label = kind_label(m) + ("" if m.status == "active" else f" ({m.status})")
            label += " pinned" if m.pinned else ""
        else:
            label = f"message/{hit.message.session_id}" if hit.message else "message"
        head = f"#{hit.id}  {label}  "
        print(head + truncate(one_line(hit.text), width - len(head)))
        print(f"    score {hit.score:.4f} · {_why(hit.signals)}")
    return 0


# -- show --------------------------------------------------------------------------------------


def _change(entry: Any) -> str:
    old, new = entry.old or {}, entry.new or {}
    if old and new:
        return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in new)
    if entry.action == "supersedes" and "supersedes" in new:
        return f"replaces #{new['supersedes']}"
    if entry.action == "superseded" and "superseded_by" in new:
        return f"replaced by #{new['superseded_by']}"
    return ", ".join(f"{k}={v!r}" for k, v in new.items() if v is not None)


def cmd_show(args: argparse.Namespace) -> int:
    from navi_desktop.expiry import describe

    async def work(store: MemoryStore):
        m = await store.get(args.id)
        return m, await store.versions(m.id), await store.history(args.id)

    # A look: on a read-only disk the file is read without writing to it or beside it.
    m, versions, history = with_store(
        args, work, unknown=f"no memory with id {args.id}", reads=True
    )
    if wants_json(args):
        emit_json(
            {
                "memory": m.to_dict(),
                "versions": [v.to_dict() for v in versions],
                "history": [h.to_dict() for h in history],
            }
        )
        return 0
    fields = [
        ("kind", m.kind),
        ("category", m.category),
        ("subject", m.subject),
        ("key", m.key),
        ("value", m.value),
        ("evidence", m.evidence),
        ("source", m.source),
        ("confidence", f"{m.confidence:.2f}"),
        ("status", m.status),
        ("pinned", "yes" if m.pinned else "no"),
        ("strength", f"{m.strength:.2f}"),
        ("mentions", str(m.mentions)),
        ("created", m.created_at),
        ("updated", m.updated_at),
        ("last used", m.last_used_at),
        ("valid", f"{m.valid_from} to {m.valid_to or 'now'}"),
        ("expires", describe(m.expires_at) if m.expires_at else None),
        ("verified", m.last_verified_at),
        ("session", m.session_id),
        ("replaced by", f"#{m.superseded_by}" if m.superseded_by else None),
    ]
    print(f"Memory #{m.id}")
    for name, value in fields:
        text = "-" if value is None else safe(str(value)).replace("\n", "\n" + " " * 15)
        print(f"  {name:<12} {text}")
    if versions:
        print("Earlier versions:")
        for v in versions:
            print(f"  #{v.id}  {v.valid_from} to {v.valid_to or '?'}  {one_line(v.value)}")
    print("History:")
    for h in history:
        print(f"  {h.at}  {h.action:<11} {h.actor:<6} {one_line(_change(h))}".rstrip())
    return 0


# -- export / import ---------------------------------------------------------------------------
