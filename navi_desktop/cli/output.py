"""Plain terminal output: one-line errors, JSON documents, aligned tables that fit the terminal.

Standard library only, so importing it costs nothing at startup.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import select
import shutil
import stat
import sys
import unicodedata
from collections.abc import Sequence
from typing import Any, TextIO

from navi_desktop.terminal_text import safe

_SPACE = re.compile(r"\s+")


def say(line: str) -> None:
    """A line on stdout that may quote a model, a file or a setting: no control character
    in it reaches the terminal (a session end's reason once cleared the screen)."""
    print(safe(line))


def error(message: str) -> None:
    """One line on stderr naming the problem."""
    print(f"navi: {one_line(str(message))}", file=sys.stderr)


def emit_json(data: Any, file: TextIO | None = None) -> None:
    """The one JSON document a command writes to stdout (``file``: elsewhere). A file name
    that is not UTF-8 (its bytes kept as lone surrogates) is written as JSON's escapes, which
    read back to the same name."""
    from navi_desktop.daemon.wire import escape_surrogates

    text = escape_surrogates(json.dumps(data, ensure_ascii=False, indent=2))
    (file or sys.stdout).write(text + "\n")


def bytes_through() -> None:
    """Let bytes that are not UTF-8 through stdin and stdout, where a strict locale (a UTF-8
    one other than C.UTF-8) fails on them: a file name prints as its bytes, as ``ls`` does
    (not a traceback after the work was done), and an answer typed in Latin-1 to "Forget …?
    [y/N]" is read as not "y"."""
    for stream in (sys.stdout, sys.stdin):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(io.UnsupportedOperation):  # already read from: as it is
                reconfigure(errors="surrogateescape")


class OutputError(Exception):
    """Standard output refused a write (a full disk, an I/O error): what the command printed
    is cut short. Not an OSError, which a command could take for a failure of its own file."""

    def __init__(self, err: OSError) -> None:
        super().__init__(err.strerror or str(err))
        self.errno = err.errno
        self.kept = ""  # what of the command's work is kept all the same, and where


class _WholeWrites(io.FileIO):
    """Standard output that writes all it is given, or raises OutputError. Python's own drops
    what a short write left (PYTHONUNBUFFERED: an export to a nearly full disk was cut at its
    size, exit 0), and a flush that fails at exit is only warned about."""

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            try:
                n = super().write(view[done:])
            except BrokenPipeError:  # the reader went away: not an error (see cli.main)
                raise
            except OSError as exc:
                raise OutputError(exc) from None
            if n is None:  # a non-blocking stdout that is full: wait until it takes more
                select.select([], [self], [])
                continue
            done += n
        return done


class _Closed(io.RawIOBase):
    """Standard output of a command started with it closed (`>&-`), where Python has none
    (None: a command's first print was a traceback): its first write fails in one line."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raise OutputError(OSError(errno.EBADF, "standard output is closed"))


def stdout_closed() -> bool:
    """Whether the command was started with its standard output closed (see ``_Closed``)."""
    return sys.stdout is None or isinstance(getattr(sys.stdout, "buffer", None), _Closed)


def whole_stdout() -> None:
    """Put ``sys.stdout`` through ``_WholeWrites``, keeping its encoding and buffering; left
    as it is when it is not the process's own (a test's capture). A closed one (None) fails
    at its first write, as a full disk does."""
    out = sys.stdout
    if out is None:
        sys.stdout = io.TextIOWrapper(_Closed(), encoding="utf-8", line_buffering=True)
        return
    if type(out) is not io.TextIOWrapper:
        return
    buffer = out.buffer
    raw = getattr(buffer, "raw", buffer)
    if type(raw) is not io.FileIO:
        return
    out.flush()
    whole = _WholeWrites(raw.fileno(), "w", closefd=False)
    sys.stdout = io.TextIOWrapper(
        whole if raw is buffer else io.BufferedWriter(whole),
        encoding=out.encoding,
        errors=out.errors,
        newline="\n",
        line_buffering=out.line_buffering,
        write_through=out.write_through,
    )


def output_failure(err: OutputError) -> str:
    """One line for a write to standard output that failed: where, why, and what to do."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced (a test's capture)
        fd = 1
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
        is_file = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        target, is_file = "", False
    where = target if is_file and target.startswith("/") else ""
    if err.errno == errno.ENOSPC:
        cause = "disk full"
        if where:  # a device (/dev/full) has no folder nor space to name
            with contextlib.suppress(OSError):
                st = os.statvfs(os.path.dirname(where))
                free = st.f_bavail * st.f_frsize / 1e6
                cause += f" ({free:.1f} MB free in {os.path.dirname(where)})"
        fix = "free some space, or send it to another disk"
    elif err.errno == errno.EBADF:
        cause = "standard output is closed"
        fix = "run it with its output open (not `>&-`)"
    elif err.errno == errno.EIO:
        cause = "an input/output error"
        fix = "check that disk (`dmesg`), or send it to another disk"
    else:
        reason = str(err)
        cause, fix = reason[:1].lower() + reason[1:], "send it elsewhere"
    cut = f"{where} is" if where else "it is"
    kept = f", {err.kept}" if err.kept else ""
    return f"cannot write the output: {cause}; {cut} cut short{kept}: {fix}"


def one_line(text: str) -> str:
    """Text as a single line: control characters replaced, whitespace runs collapsed."""
    return _SPACE.sub(" ", safe(text)).strip()


def terminal_width() -> int:
    return max(40, shutil.get_terminal_size((100, 24)).columns)


def char_width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def display_width(text: str) -> int:
    return sum(char_width(ch) for ch in text)


def truncate(text: str, width: int) -> str:
    """Cut ``text`` to at most ``width`` terminal cells, ending with '…' when cut."""
    if display_width(text) <= width:
        return text
    if width <= 0:
        return ""
    out, used = [], 0
    for ch in text:
        w = char_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def pad(text: str, width: int) -> str:
    return text + " " * max(0, width - display_width(text))


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, flex: int, width: int | None = None
) -> list[str]:
    """Aligned columns; column ``flex`` takes the room left and is truncated to fit ``width``."""
    width = terminal_width() if width is None else width
    cells = [[one_line(c) for c in row] for row in rows]
    widths = [display_width(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], display_width(cell))
    gap = 2
    fixed = sum(w for i, w in enumerate(widths) if i != flex) + gap * (len(headers) - 1)
    widths[flex] = max(10, min(widths[flex], width - fixed))
    lines = []
    for row in [list(headers), *cells]:
        parts = [pad(truncate(cell, widths[i]), widths[i]) for i, cell in enumerate(row)]
        lines.append((" " * gap).join(parts).rstrip())
    return lines


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"  # pragma: no cover


def nuls_note(count: int) -> str:
    """What an import or a migration to the memory server says of the NUL characters it
    stored as U+FFFD (its text cannot hold one; pg/db.py), after its own sentence."""
    if not count:
        return ""
    return (
        f" {count} NUL character(s) (\\u0000) stored as U+FFFD (�): the memory server's text"
        " cannot hold one."
    )
