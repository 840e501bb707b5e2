"""Plain terminal output: one-line errors, JSON documents, aligned tables that fit the terminal.

Standard library only, so importing it costs nothing at startup.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import sys
import unicodedata
from collections.abc import Sequence
from typing import Any, TextIO

from navi_desktop.terminal_text import safe

_SPACE = re.compile(r"\s+")


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
