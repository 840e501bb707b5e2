"""``navi memory entity NAME`` and ``navi memory entities``: the people, places and projects
Navi has met, what it knows about each, and the user's corrections (rename, merge)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from navi_desktop.cli.output import emit_json, one_line, safe, table, terminal_width, truncate
from navi_desktop.cli.profile_access import text_of, wants_json, with_store
from navi_desktop.errors import InvalidInput
from navi_desktop.limits import ENTITY_SEARCH, MAX_ENTITY_NAME, check_length

if TYPE_CHECKING:
    from navi_desktop.memory import MemoryStore

SORTS = ("mentions", "name")  # memory/entity_profiles.SORTS (not imported: start-up time)


def register(command: Any) -> None:
    p = command(
        "entity",
        cmd_entity,
        "what Navi knows about a person, place or project; rename it, or merge another into it",
        epilog="NAME may be any of the entity's names (its aliases too).",
    )
    p.add_argument("name", metavar="NAME")
    change = p.add_mutually_exclusive_group()
    change.add_argument(
        "--rename", metavar="NEW", help="call it NEW; the old name stays as an alias"
    )
    change.add_argument(
        "--merge",
        metavar="OTHER",
        help="OTHER is the same thing: its names become aliases of NAME, its mentions NAME's",
    )
    p.add_argument(
        "--limit", type=int, default=20, metavar="N", help="facts and summaries shown (default 20)"
    )

    p = command("entities", cmd_entities, "list the people, places and projects Navi has met")
    p.add_argument("--sort", choices=SORTS, default="mentions", help="order (default: mentions)")
    p.add_argument("--search", metavar="TEXT", help="only those with a name that contains TEXT")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="page size (default 50)")
    p.add_argument("--offset", type=int, default=0, metavar="N", help="skip the first N")


def _checked(text: str, what: str) -> str:
    if not text.strip():
        raise InvalidInput(f"{what} is empty: give a name (navi memory entities lists them)")
    check_length(text, MAX_ENTITY_NAME, what)
    return text


def cmd_entity(args: argparse.Namespace) -> int:
    name = _checked(args.name, "the entity's name")
    if args.rename is not None:
        _checked(args.rename, "--rename")
    if args.merge is not None:
        _checked(args.merge, "--merge")
    if not 1 <= args.limit <= 10_000:
        raise InvalidInput(f"--limit must be between 1 and 10000, got {args.limit}")

    async def work(store: MemoryStore):
        if args.rename is not None:
            return "renamed", await store.rename_entity(name, args.rename)
        if args.merge is not None:
            return "merged", await store.merge_entities(name, args.merge)
        return None, await store.entity(name, limit=args.limit)

    looks = args.rename is None and args.merge is None
    unknown = None if looks else f"no entity named {name!r}"  # renaming what is not there
    action, profile = with_store(args, work, reads=looks, unknown=unknown)
    if wants_json(args):
        emit_json({"action": action, "entity": profile.to_dict()} if action else profile.to_dict())
        return 0
    if action == "renamed":
        print(f"Renamed {args.name.strip()!r} to {profile.name!r}.")
    elif action == "merged":
        print(f"Merged {args.merge.strip()!r} into {profile.name!r}.")
    for line in _profile_lines(profile):
        print(line)
    return 0


def _profile_lines(profile: Any) -> list[str]:
    width = terminal_width()
    memories = profile.mentions - profile.messages
    mentions = (
        f"{profile.mentions} ({_count(memories, 'memory', 'memories')},"
        f" {_count(profile.messages, 'message', 'messages')})"
    )
    lines = [
        safe(profile.name),
        f"  {'type':<10} {profile.type or '-'}",
        f"  {'aliases':<10} {one_line(', '.join(profile.aliases)) or '-'}",
        f"  {'mentions':<10} {mentions}",
    ]
    for title, items, total in (
        ("Facts", profile.facts, profile.facts_total),
        ("Session summaries", profile.episodes, profile.episodes_total),
    ):
        if not total:
            continue
        count = f"{total}" if len(items) == total else f"{len(items)} of {total}"
        lines.append(f"{title} ({count}):")
        for m in items:
            head = f"  #{m.id}  "
            lines.append(head + truncate(one_line(text_of(m)), width - len(head)))
    if not profile.facts_total and not profile.episodes_total:
        lines.append("No current fact or summary names it (only messages).")
    return lines


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def cmd_entities(args: argparse.Namespace) -> int:
    if args.limit < 1 or args.offset < 0:
        raise InvalidInput("--limit must be at least 1 and --offset not negative")
    check_length(args.search, MAX_ENTITY_NAME, ENTITY_SEARCH)

    async def work(store: MemoryStore):
        return await store.list_entities(
            sort=args.sort, query=args.search, limit=args.limit, offset=args.offset
        )

    entities, total = with_store(args, work, reads=True)
    if wants_json(args):
        emit_json(
            {
                "total": total,
                "offset": args.offset,
                "limit": args.limit,
                "entities": [e.to_dict() for e in entities],
            }
        )
        return 0
    if not entities:
        if total:
            print(f"No entities past {args.offset} (of {total}).")
        elif args.search:
            print(f"No entity has a name that contains {one_line(args.search)!r}.")
        else:
            print("No entities yet: Navi notes the names you mention as you chat.")
        return 0
    rows = [[e.name, e.type or "-", str(e.mentions), ", ".join(e.aliases) or "-"] for e in entities]
    for line in table(["NAME", "TYPE", "MENTIONS", "ALIASES"], rows, flex=3):
        print(line)
    first, last = args.offset + 1, args.offset + len(entities)
    if first > 1 or last < total:
        more = f"; next page: --offset {last}" if last < total else ""
        print(f"({first}-{last} of {total}{more})")
    return 0
