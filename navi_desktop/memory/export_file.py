"""Reading an export file, by whoever imports it: the CLI working on the file itself, or the
daemon, which reads a large export from its path (a request over the socket is held to
8 MiB, and an export of 100k memories is ~100 MB)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

from navi_desktop.errors import InvalidInput
from navi_desktop.fileio import open_regular
from navi_desktop.memory.export_format import parse_export

MAX_IMPORT_BYTES = 1 << 30  # an export of 100k memories with their history is ~100 MB


def _too_large(source: str) -> str:
    return f"{source}: larger than {MAX_IMPORT_BYTES >> 20} MiB, more than any export holds"


def read_export_bytes(source: str, stream: BinaryIO) -> dict[str, Any]:
    """The export in ``stream``, checked (``source`` names it in errors)."""
    try:
        raw = stream.read(MAX_IMPORT_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {source}: {exc.strerror or exc}") from exc
    if isinstance(raw, str):  # a text stream (a stdin replaced by a test, a wrapper)
        raw = raw.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_IMPORT_BYTES:
        raise InvalidInput(_too_large(source))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{source}: not UTF-8 text (byte {exc.start})") from exc
    del raw  # the bytes are not needed while the text is parsed: a whole copy less at the peak
    return parse_export(text, source)


def read_export_file(path: Path, source: str | None = None) -> dict[str, Any]:
    """The export at ``path``, checked (``source``: how errors name it). Only a regular file
    is read: a named pipe or a device at the path would hold the reader (the daemon's
    thread) forever."""
    source = source or str(path)
    try:
        fd = open_regular(path)
    except OSError as exc:
        raise InvalidInput(f"cannot read {source}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(fd).st_size > MAX_IMPORT_BYTES:  # said before a byte of it is read
            raise InvalidInput(_too_large(source))
        return read_export_bytes(source, handle)
