"""``navi memory pin``, ``confirm`` and ``edit``: changes to one memory, by hand."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from navi_desktop.cli.output import emit_json, one_line
from navi_desktop.cli.profile_access import check_choice, text_of, wants_json, with_store
from navi_desktop.errors import InvalidInput
from navi_desktop.limits import check_memory_fields

if TYPE_CHECKING:
    from navi_desktop.memory import MemoryStore

EXPIRES_HELP = "when it stops being true: 7d, 2w, or a date (2025-06-30: through that day)"


def register(command: Any) -> None:
    p = command("pin", cmd_pin, "pin a memory (it never decays), or unpin it with --off")
    p.add_argument("id", type=int, metavar="ID")
    p.add_argument("--off", action="store_true", help="unpin")

    p = command(
        "confirm",
        cmd_confirm,
        "confirm a fact is still true: it is pinned, fully trusted, and marked verified now",
    )
    p.add_argument("id", type=int, metavar="ID")

    p = command("edit", cmd_edit, "fix a memory in place, or --correct it with a new version")
    p.add_argument("id", type=int, metavar="ID")
    p.add_argument("--value", metavar="TEXT")
    p.add_argument("--category", metavar="C", help="'' clears it")
    p.add_argument("--subject", metavar="S", help="'' clears it")
    p.add_argument("--key", metavar="K", help="'' clears it")
    p.add_argument("--evidence", metavar="TEXT", help="'' clears it")
    p.add_argument("--confidence", type=float, metavar="X", help="0 to 1")
    p.add_argument("--expires", metavar="WHEN", help=EXPIRES_HELP + "; never clears it")
    p.add_argument(
        "--correct",
        metavar="VALUE",
        help="the world changed: a new version with this value replaces the memory, which"
        " stays in its history (combine only with --evidence)",
    )


# -- pin and confirm ---------------------------------------------------------------------------


def cmd_pin(args: argparse.Namespace) -> int:
    async def work(store: MemoryStore):
        return await store.pin(args.id, not args.off)

    m = with_store(args, work, unknown=f"no memory with id {args.id}")
    if wants_json(args):
        emit_json({"memory": m.to_dict()})
    else:
        print(f"{'Pinned' if m.pinned else 'Unpinned'} #{m.id}: {one_line(text_of(m))}")
    return 0


def cmd_confirm(args: argparse.Namespace) -> int:
    async def work(store: MemoryStore):
        return await store.confirm(args.id)

    m = with_store(args, work, unknown=f"no memory with id {args.id}")
    if wants_json(args):
        emit_json({"memory": m.to_dict()})
    else:
        print(f"Confirmed #{m.id}: {one_line(text_of(m))} [pinned, verified {m.last_verified_at}]")
    return 0


# -- edit --------------------------------------------------------------------------------------

FLAGS = {"expires_at": "expires"}  # a change's name -> its option


def cmd_edit(args: argparse.Namespace) -> int:
    from navi_desktop.expiry import parse_expires
    from navi_desktop.memory.models import CATEGORIES

    clearable = ("category", "subject", "key", "evidence")
    changes: dict[str, Any] = {}
    for name in ("value", *clearable, "confidence"):
        value = getattr(args, name)
        if value is not None:
            changes[name] = None if name in clearable and value == "" else value
    if args.expires is not None:
        changes["expires_at"] = parse_expires(args.expires, "--expires")
    if args.correct is not None:
        other = sorted(FLAGS.get(n, n) for n in set(changes) - {"evidence"})
        if other:
            raise InvalidInput(
                "--correct makes a new version; it combines only with --evidence, not --"
                + ", --".join(other)
            )
        if not args.correct.strip():
            raise InvalidInput("--correct needs a non-empty value")
    elif not changes:
        raise InvalidInput(
            "nothing to change: give --value, --category, --subject, --key, --evidence,"
            " --confidence, --expires or --correct"
        )
    check_choice("category", changes.get("category"), CATEGORIES)
    texts = {n: changes[n] for n in ("value", "subject", "key", "evidence") if n in changes}
    check_memory_fields(**texts, **({"value": args.correct} if args.correct else {}))
    if "value" in changes and not changes["value"].strip():
        raise InvalidInput("a memory needs a non-empty value")
    if "confidence" in changes and not 0 <= changes["confidence"] <= 1:
        raise InvalidInput(f"confidence must be between 0 and 1, got {changes['confidence']}")

    async def work(store: MemoryStore):
        before = await store.get(args.id)
        if args.correct is not None:
            return "corrected", await store.correct(
                args.id, args.correct, evidence=changes.get("evidence")
            )
        after = await store.edit(args.id, **changes)
        return ("edited" if after != before else "unchanged"), after

    action, m = with_store(args, work, unknown=f"no memory with id {args.id}")
    replaced = args.id if action == "corrected" else None
    if wants_json(args):
        emit_json({"action": action, "memory": m.to_dict(), "replaced": replaced})
        return 0
    if action == "corrected":
        print(f"Corrected: #{m.id} replaces #{args.id}: {one_line(text_of(m))}")
    elif action == "edited":
        expiry = ""
        if "expires_at" in changes and m.expires_at:
            from navi_desktop.expiry import describe

            expiry = f" (expires {describe(m.expires_at)})"
        print(f"Edited #{m.id}: {one_line(text_of(m))}{expiry}")
    else:
        print(f"No change to #{m.id}.")
    return 0
