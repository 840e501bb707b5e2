"""``navi memory export``, ``import`` and ``stats``: a profile as a whole, in and out."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navi_desktop.cli.main import CommandError
from navi_desktop.cli.output import emit_json, human_size, nuls_note, safe, stdout_closed
from navi_desktop.cli.profile_access import profile_name, wants_json, with_store
from navi_desktop.errors import InvalidInput
from navi_desktop.fileio import nothing_at, write_user_file
from navi_desktop.paths import Paths
from navi_desktop.stopping import removed_on_stop

if TYPE_CHECKING:
    from navi_desktop.memory import MemoryStore

# An export larger than this goes to the daemon by its path, not in the request (8 MiB).
INLINE_BYTES = 4 << 20


def register(command: Any) -> None:
    p = command("export", cmd_export, "export memories (JSON round-trips; Markdown is to read)")
    p.add_argument("--format", choices=("json", "markdown"), default="json")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (0600) instead of stdout")

    p = command("import", cmd_import, "import a JSON export; what is already there is skipped")
    p.add_argument("file", metavar="FILE", help="an export file, or - for stdin")

    command("stats", cmd_stats, "counts, file path and size")


def cmd_export(args: argparse.Namespace) -> int:
    import json

    if args.output == "":  # Path("") is ".": it was refused as "cannot write : it is a folder"
        raise InvalidInput(
            "the output path is empty (-o ''): give the file to write, as in -o memories.json,"
            " or leave -o out to print the export"
        )
    to_stdout = args.output in (None, "-")
    if to_stdout and stdout_closed():  # started with it closed (`>&-`)
        raise InvalidInput("standard output is closed: write the export to a file (-o FILE)")
    if wants_json(args) and to_stdout and args.format != "json":
        raise InvalidInput("--json prints JSON: use --format json, or -o FILE for Markdown")

    async def work(store: MemoryStore):
        data = await store.export_data()
        text = (
            json.dumps(data, ensure_ascii=False, indent=2) + "\n"
            if args.format == "json"
            else await store.export_markdown()
        )
        return data, text

    data, text = with_store(args, work, reads=True)
    if to_stdout:
        if sys.stdout.isatty():  # memories quote models and files: none may drive the terminal
            text = safe(text)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    target = Path(args.output)
    try:
        streamed = write_user_file(target, text)
    except OSError as exc:
        raise InvalidInput(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    count = len(data["memories"])
    out = sys.stderr if streamed else sys.stdout  # -o /dev/stdout: not into the export
    if wants_json(args):
        emit_json({"path": str(target.absolute()), "format": args.format, "memories": count}, out)
    else:
        noun = "memory" if count == 1 else "memories"
        print(f"Exported {count} {noun} ({args.format}) to {args.output}.", file=out)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from navi_desktop.daemon.client import DaemonUnavailable
    from navi_desktop.daemon.memory_api import RemoteMemory
    from navi_desktop.memory.export_file import (
        MAX_IMPORT_BYTES,
        read_export_bytes,
        read_export_file,
    )

    # Read and checked here, before the profile is opened: a bad file changes nothing.
    raw = b""
    path = None if args.file == "-" else Path(args.file).absolute()
    if path is None and sys.stdin.isatty():  # it would wait, silent, for an export typed in
        raise InvalidInput(
            '"-" reads the export from standard input, which is a terminal here: pipe it in'
            " (navi memory import - < export.json), or give the file's path"
        )
    if path is None:
        try:
            raw = getattr(sys.stdin, "buffer", sys.stdin).read(MAX_IMPORT_BYTES + 1)
        except OSError as exc:
            raise InvalidInput(f"cannot read stdin: {exc.strerror or exc}") from exc
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogatepass")
        data = read_export_bytes("stdin", io.BytesIO(raw))
    else:
        data = read_export_file(path, args.file)
    big = (path.stat().st_size if path is not None else len(raw)) > INLINE_BYTES

    async def work(store: MemoryStore):
        if not big or not isinstance(store, RemoteMemory):
            return await store.import_data(data)
        if path is not None:  # the daemon reads it: it is over a request's size
            return await store.import_file(path)
        with spooled(raw) as spool:  # piped in: kept in a private file meanwhile
            return await store.import_file(spool)

    try:
        report = with_store(args, work)
    except DaemonUnavailable as exc:  # it went away mid-import: say what became of it
        raise CommandError(
            f"{exc} during the import: an import is saved whole or not at all, so run it"
            " again (what it already saved is skipped)"
        ) from exc
    if wants_json(args):
        emit_json(
            {
                "added": report.added,
                "skipped": report.skipped,
                "blocked": report.blocked,
                "nuls_replaced": report.nuls_replaced,
            }
        )
    else:
        source = "stdin" if path is None else args.file
        print(
            f"Imported {source}: {report.added} added, {report.skipped} skipped (already here),"
            f" {report.blocked} blocked (forgotten before).{nuls_note(report.nuls_replaced)}"
        )
    return 0


@contextlib.contextmanager
def spooled(raw: bytes) -> Iterator[Path]:
    """``raw`` in a new private file in the run folder, removed afterwards."""
    from navi_desktop.daemon.files import SPOOL_PREFIX
    from navi_desktop.memory.failures import os_failure
    from navi_desktop.paths import Paths, ensure_own_dir

    folder = Paths.from_env().runtime
    ensure_own_dir(folder, "run folder")
    fd, name = tempfile.mkstemp(dir=folder, prefix=SPOOL_PREFIX, suffix=".json")
    try:
        with removed_on_stop(name):  # nor by SIGTERM
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(raw)
            except OSError as exc:  # a full disk: one line, and no half file left
                raise os_failure(exc, Path(name)) from exc
            yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


# -- stats -------------------------------------------------------------------------------------


def cmd_stats(args: argparse.Namespace) -> int:
    args.profile = profile = profile_name(args)  # resolved once: with_store reads it from args

    own = Paths.from_env().profile_db(profile)

    async def work(store: MemoryStore):
        stats = await store.stats()
        if stats.get("backend") != "postgres" and nothing_at(own):  # an empty store answered
            stats |= {"path": str(own), "file_bytes": 0}
        return stats

    stats = with_store(args, work, reads=True)
    stats = {"profile": profile, **stats}
    if wants_json(args):
        emit_json(stats)
        return 0
    print(f"Profile     {profile}")
    if stats.get("backend") == "postgres":  # a memory server: no file of its own
        print(f"Server      {stats['path']}")
        print(f"Substrings  {stats['substring_search']}")
    elif not Path(stats["path"]).exists():  # read by the daemon without making the profile
        print(f"File        {stats['path']} (none yet: made by the first memory saved)")
    else:
        print(f"File        {stats['path']} ({human_size(stats['file_bytes'])})")
    memories = stats["memories"]
    total = sum(sum(by.values()) for by in memories.values())
    print(f"Memories    {total}")
    for kind in sorted(memories):
        parts = ", ".join(f"{n} {status}" for status, n in sorted(memories[kind].items()))
        print(f"  {kind:<10} {parts}")
    if stats["facts_by_category"]:
        parts = ", ".join(f"{c} {n}" for c, n in sorted(stats["facts_by_category"].items()))
        print(f"Facts       {parts}")
    print(f"Pinned      {stats['pinned']}")
    print(f"Sessions    {stats['sessions']} ({stats['messages']} messages)")
    print(f"Forgotten   {stats['tombstones']} (tombstones)")
    for scrub in stats.get("pending_scrubs") or []:
        ids = ", ".join(f"#{i}" for i in scrub["ids"]) or "a deleted session"
        print(f"Scrubbing   {ids}: waiting since {scrub['since'][:19]}Z: {scrub['reason']}")
    print(f"Entities    {stats['entities']}")
    rated = stats.get("rated_replies") or {}
    print(f"Ratings     {rated.get('up', 0)} up, {rated.get('down', 0)} down (replies)")
    for e in stats["embeddings"]:
        print(f"Vectors     {e['count']} × {e['model']} ({e['dim']}-d)")
    return 0
