"""Reading a write-ahead log's frame headers as SQLite's recovery does, without SQLite.

SQLite replays any log it finds beside a file: nothing in a log ties it to its file (its
header holds random salts, its frames page numbers), so another database's log, left
beside a profile's file, would be read as the file's own. What the headers do say (the page
size, which pages the saves rewrite, and the database size each commit leaves) is what
filecheck.py compares with the file. Format: https://sqlite.org/fileformat.html#walformat
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = (0x377F0682, 0x377F0683)  # checksums of little- or big-endian words
VERSION = 3007000
HEADER_BYTES = 32
FRAME_HEADER_BYTES = 24


@dataclass(frozen=True)
class LogScan:
    page_size: int
    page_one: bool  # a frame rewrites page 1, which holds the file's header (and its id)
    sizes: frozenset[int]  # the database sizes, in pages, that its commits leave


def scan(wal: Path) -> LogScan | None:
    """The log's frames that SQLite would read (this log generation's salts), up to the first
    of page 1; None when it would read none (too short, not a log, its header's checksum
    wrong). The frames' own checksums are not verified: a torn last frame is at most counted,
    which only ever spares a log (see filecheck.check_log)."""
    with wal.open("rb") as fh:
        head = fh.read(HEADER_BYTES)
        if len(head) < HEADER_BYTES:
            return None
        magic, version, page_size, _, salt1, salt2, sum1, sum2 = struct.unpack(">8I", head)
        valid_size = 512 <= page_size <= 65536 and page_size & (page_size - 1) == 0
        if magic not in MAGIC or version != VERSION or not valid_size:
            return None
        if _checksum(head[:24], big_endian=bool(magic & 1)) != (sum1, sum2):
            return None
        end = fh.seek(0, 2)
        sizes: set[int] = set()
        offset = HEADER_BYTES
        while offset + FRAME_HEADER_BYTES + page_size <= end:
            fh.seek(offset)
            page, size, s1, s2 = struct.unpack(">4I", fh.read(16))
            if (s1, s2) != (salt1, salt2) or page == 0:
                break
            offset += FRAME_HEADER_BYTES + page_size
            if page == 1:
                return LogScan(page_size, True, frozenset(sizes))
            if size:  # a commit
                sizes.add(size)
    return LogScan(page_size, False, frozenset(sizes))


def _checksum(data: bytes, *, big_endian: bool) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    s0 = s1 = 0
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1
