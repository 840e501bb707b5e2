"""Counting what a query's words and names match, up to a cap, to keep the rarest; and the
counts kept between searches.

To keep the rarest of a query's words (BM25) or names (the entity signal), search counts the
rows each one matches, up to a cap. At 1M memories a query of two common words counted up to
48,000 rows each, ~15 ms of every such query, to learn the same two numbers as the query
before. A count only decides which words are worth scoring, so one taken a few rows ago does
as well: it is kept while its table has grown by no more than DRIFT of its rows. Rows that
leave the index (a forget, an edit, a deleted session) drop every count kept for their table
at once (store._unindex_memory, _unindex_messages), and a table seen to shrink does too, so
no word of what was forgotten outlives the next search.
"""

from __future__ import annotations

import hashlib
import secrets
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

# Times the count cap is raised to tell which of several common items is the rarest
# (counted_to_rarest): up to 16x the budget.
COUNT_RAISES = 2
DRIFT = 0.02  # of the table's rows, or MIN_DRIFT rows when that is more
MIN_DRIFT = 100
SIZE = 4096  # counts kept, least recently used dropped first
WHOLE = sys.maxsize  # the cap of a count taken without one
T = TypeVar("T")


def within_budget(counted: Sequence[tuple[int, Any]], budget: int) -> list[tuple[int, Any]]:
    """The (count, item) pairs kept, rarest first, while their counts sum within ``budget``;
    the rarest is always kept."""
    ordered = sorted(counted)
    kept, spent = ordered[:1], ordered[0][0]
    for count, item in ordered[1:]:
        if spent + count > budget:
            break
        kept.append((count, item))
        spent += count
    return kept


def counted_to_rarest(
    items: Sequence[T], count: Callable[[T, int], int], budget: int
) -> list[tuple[int, T]]:
    """(count, item) for each item, counted up to a cap: past ``budget`` a count says only
    "too many". When every item is past it, the rarest is still the one to keep, so the cap
    is raised (4x at a time, COUNT_RAISES times) until one is under it: counted at the budget
    alone, three common words tied, and the tie went to the commonest of them."""
    cap = budget + 1
    counts = [(count(item, cap), item) for item in items]
    for _ in range(COUNT_RAISES):
        if len(counts) < 2 or min(n for n, _ in counts) < cap:
            break
        cap *= 4
        counts = [(count(item, cap), item) for item in items]
    return counts


class MatchCounts:
    """Thread-safe: the search signals count on their own read connections side by side."""

    def __init__(self, size: int = SIZE) -> None:
        self._size = size
        # (table, item) -> (the table's rows then, the cap counted to, the count). A word is
        # kept as a keyed hash: what someone searched for (incognito too) is not held in
        # readable form for as long as its count is.
        self._kept: OrderedDict[tuple[str, object], tuple[int, int, int]] = OrderedDict()
        self._salt = secrets.token_bytes(16)
        self._rows: dict[str, int] = {}  # each table's rows when last seen
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def drop(self, *tables: str) -> None:
        """Forget the counts kept for ``tables``: rows left them (or moved), which a later
        search would not see as a shrink when others came in meanwhile."""
        with self._lock:
            for table in tables:
                self._drop(table)

    def _drop(self, table: str) -> None:
        for key in [k for k in self._kept if k[0] == table]:
            del self._kept[key]

    def count(
        self, table: str, item: object, rows: int, cap: int, counter: Callable[[int], int]
    ) -> int:
        """``counter(cap)``: the rows of ``table`` (now ``rows`` of them) that ``item``
        matches, counted up to ``cap`` (WHOLE: all); or the count kept from an earlier call
        when it still answers that."""
        key = (table, self._sealed(item))
        with self._lock:
            if rows < self._rows.get(table, 0):  # rows were deleted
                self._drop(table)
            self._rows[table] = rows
            kept = self._kept.get(key)
            if kept is not None:
                then, counted_to, found = kept
                fresh = then <= rows <= then + max(MIN_DRIFT, int(then * DRIFT))
                if fresh and (found < counted_to or cap <= counted_to):
                    self._kept.move_to_end(key)
                    return min(found, cap)
        found = counter(cap)
        with self._lock:
            self._kept[key] = (rows, cap, found)
            self._kept.move_to_end(key)
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)
        return found

    def _sealed(self, item: object) -> object:
        if isinstance(item, str):
            return hashlib.blake2b(item.encode(), key=self._salt, digest_size=16).digest()
        return item  # an entity's id
