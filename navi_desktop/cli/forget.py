"""``navi memory forget``: show where a memory's value occurs, then forget it everywhere (or
only the memory and its evidence). Kept apart from the other memory commands: the preview and
its confirmations are most of it."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from navi_desktop.cli.output import emit_json, human_size, one_line, truncate
from navi_desktop.cli.profile_access import profile_name, wants_json, with_store
from navi_desktop.errors import InvalidInput, NaviError

if TYPE_CHECKING:
    from navi_desktop.memory import MemoryStore


def register(command: Any) -> None:
    p = command(
        "forget",
        cmd_forget,
        "forget a memory and every trace of it, for good (without --yes: see where it occurs)",
        epilog="Matching: the value and evidence quotes are found as whole words, ignoring case,"
        " Unicode forms (NFKC) and spacing. Values shorter than 3 characters, made of common"
        " words, or found in many messages need --everywhere with --yes.",
    )
    p.add_argument("id", type=int, metavar="ID")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument(
        "--compact",
        action="store_true",
        help="then rewrite the file (VACUUM; on a memory server VACUUM FULL, as the tables'"
        " owner) so no free space keeps the old rows",
    )
    command(
        "compact",
        cmd_compact,
        "rewrite the file (VACUUM; on a memory server VACUUM FULL of Navi's tables, as their"
        " owner) so no free space keeps what was forgotten",
    )
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--everywhere",
        action="store_true",
        help="confirm removing a short or common value everywhere it occurs (the default scope)",
    )
    scope.add_argument(
        "--only-evidence",
        action="store_true",
        help="forget the memory and its evidence quotes, but keep other mentions of the value",
    )


def _confirm(question: str) -> bool:
    """Ask on stderr (stdout stays clean for --json), read the answer from stdin."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if not answer:
        print(file=sys.stderr)
    return answer.strip().lower() in ("y", "yes")


def _preview_lines(preview: Any, scope: str) -> list[str]:
    """What a forget would remove, for a person: both scopes, a few examples, the warning."""
    lines = [f"Forget #{preview.memory_id}: {one_line(preview.text)}"]
    if preview.versions:
        lines.append("  with its earlier versions " + ", ".join(f"#{v}" for v in preview.versions))
    lines.append(f"Matched: {preview.rule}.")
    for name, places, chosen in (
        ("everywhere (default)", preview.everywhere, scope == "everywhere"),
        (
            "only the memory and its evidence (--only-evidence)",
            preview.evidence,
            scope != "everywhere",
        ),
    ):
        mark = "*" if chosen else " "
        lines.append(f"{mark} {name}: " + ("; ".join(places) if places else "nothing else"))
    if preview.samples and scope == "everywhere":
        lines.append("For example:")
        lines += [f"  {truncate(one_line(s), 100)}" for s in preview.samples]
    if preview.broad and scope == "everywhere":
        lines.append(
            f"Careful: {preview.broad}; unrelated text that contains it as a word goes too."
        )
    if preview.kept:
        lines.append(one_line(preview.kept))
    return lines


def _forget_error(memory_id: int, broad: str | None, why: str) -> InvalidInput:
    if broad:
        return InvalidInput(
            f"{why}: removing memory {memory_id}'s value everywhere needs confirmation, as"
            f" {broad}: pass --yes --everywhere, or --yes --only-evidence to keep other mentions"
        )
    return InvalidInput(f"{why}: pass --yes to forget memory {memory_id}")


def cmd_forget(args: argparse.Namespace) -> int:
    scope = "evidence" if args.only_evidence else "everywhere"
    interactive = not args.yes and sys.stdin.isatty()

    async def work(store: MemoryStore):
        preview = await store.forget_preview(args.id)
        if args.yes:
            if scope == "everywhere" and preview.broad and not args.everywhere:
                return preview, None
            return preview, await _forget(store, scope)
        if not interactive:
            return preview, None
        print("\n".join(_preview_lines(preview, scope)), file=sys.stderr)
        places = preview.everywhere if scope == "everywhere" else preview.evidence
        question = f"Forget #{preview.memory_id} ({truncate(one_line(preview.text), 60)})"
        question += ", its earlier versions" if preview.versions else ""
        question += " and every occurrence listed above" if places else ""
        if not _confirm(question + ", for good?"):
            return preview, False
        return preview, await _forget(store, scope)

    async def _forget(store: MemoryStore, scope: str) -> Any:
        report = await store.forget(args.id, scope=scope)
        if report and args.compact:
            try:
                compacted.update(await store.compact())
            except NaviError as exc:  # the forget is saved: said after it, not instead
                not_compacted.append(str(exc))
        return report

    compacted: dict[str, int] = {}
    not_compacted: list[str] = []
    preview, report = with_store(args, work, unknown=f"no memory with id {args.id}")
    broad = preview.broad if scope == "everywhere" else None
    if report is None:  # not asked: --yes refused for a broad value, or no terminal
        if args.yes:
            raise _forget_error(args.id, broad, "not forgotten")
        if wants_json(args):
            emit_json({"preview": asdict(preview)})
        else:
            print("\n".join(_preview_lines(preview, scope)))
        raise _forget_error(
            args.id, broad, "forget asks for confirmation and stdin is not a terminal"
        )
    if wants_json(args):
        doc: dict[str, Any] = {
            "forgotten": report.forgotten if report else [],
            "redacted_messages": report.redacted_messages if report else 0,
        }
        if report and report.redacted:  # present only when something beyond the memory went
            doc["redacted"] = report.redacted
        if report and report.scrub_pending:
            doc["scrub_pending"] = report.scrub_pending
        if report and report.backups:
            doc["backups"] = report.backups
        if report and report.unscrubbed:
            doc["unscrubbed"] = report.unscrubbed
        if compacted:
            doc["compacted"] = compacted
        if not_compacted:
            doc["compact_error"] = not_compacted[0]
        emit_json(doc)
        return 0 if report and not not_compacted else 1
    if not report:
        print("Nothing forgotten.")
        return 1
    ids = ", ".join(f"#{i}" for i in report.forgotten)
    line = f"Forgot {ids}."
    places = [*report.redacted]
    if report.backups:
        places.append(f"{report.backups} backup{'s' if report.backups > 1 else ''}")
    if places:
        line += " Removed from " + "; ".join(places) + "."
    print(line)
    if compacted:
        _print_compacted(compacted)
    for problem in report.unscrubbed:
        print(f"navi: a backup still holds it, delete it by hand: {problem}", file=sys.stderr)
    if report.scrub_pending:
        from navi_desktop.paths import profile_flag

        stats = f"navi memory stats{profile_flag(getattr(args, 'profile', None))}"
        print(
            f"An old copy of it is still on disk: {report.scrub_pending}. Navi removes it by"
            f" itself as soon as it can; `{stats}` lists it until then."
        )
    for problem in not_compacted:
        print(f"navi: forgotten, but not compacted: {problem}", file=sys.stderr)
    return 1 if not_compacted else 0


def _print_compacted(compacted: dict[str, int]) -> None:
    print(
        "Compacted: {} → {}.".format(
            human_size(compacted["bytes_before"]), human_size(compacted["bytes_after"])
        )
    )


def cmd_compact(args: argparse.Namespace) -> int:
    """What ``forget --compact`` does after the forget, alone: for a compaction that did not
    finish, or that needed the tables' owner."""

    async def work(store: MemoryStore) -> dict[str, int]:
        return await store.compact()

    args.profile = profile = profile_name(args)  # resolved once: with_store reads it from args
    nothing = f"no profile {profile!r}: there is nothing to compact"
    compacted = with_store(args, work, unknown=nothing)  # a typo's profile is not made
    if wants_json(args):
        emit_json({"compacted": compacted})
    else:
        _print_compacted(compacted)
    return 0


# -- pin ---------------------------------------------------------------------------------------
