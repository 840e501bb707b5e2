"""Forgetting for real: a memory and every copy of it leave the file; tombstones stay.

Two scopes (``SCOPES``):

* ``everywhere`` (the default): the memory, its earlier versions, and every occurrence of their
  values and evidence quotes anywhere in the profile (see scrub.py for the places, and
  matching.py for the matching rule). Other memories with the same value go with it.
* ``evidence``: the memory, its earlier versions and every occurrence of their evidence quotes;
  other mentions of the bare value stay (for a value such as "Bob" that is also said elsewhere).

``forget_preview`` shows, before anything changes, what each scope would touch. Tombstones are
keyed hashes, never text: one per forgotten memory (extraction must not learn it again), and
one per forgotten phrase (a tool call, an import or extraction must not bring it back inside
other text).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import InvalidInput
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.forget_copies import CopyScrubOps
from navi_desktop.memory.forget_kept import kept_after
from navi_desktop.memory.matching import (
    Matcher,
    broad_reason,
    phrase_forms,
    phrase_of,
    phrases,
    strings_in,
)
from navi_desktop.memory.scrub import UNFINISHED, ScrubCounts, ScrubOps, ScrubPlan
from navi_desktop.memory.textproc import keyed_hash, normalize_key

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store
    from navi_desktop.memory.store import MemoryStore

log = logging.getLogger(__name__)
SCOPES = ("everywhere", "evidence")
MIN_EVIDENCE = 4  # shorter quotes say too little to be matched on their own
MANY_MESSAGES = 25  # a value in more messages than this needs explicit confirmation too
MAX_PHRASE_WORDS = 64
PHRASE_CHUNK = 1000  # phrase hashes looked up a statement at a time
SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
MATCHING_RULE = (
    "whole words, ignoring case, Unicode compatibility forms (NFKC), curly quotes and spacing;"
    f" a value shorter than 3 characters, made of common words or found in more than"
    f" {MANY_MESSAGES} messages needs explicit confirmation"
)


@dataclass
class ForgetReport:
    forgotten: list[int] = field(default_factory=list)
    redacted_messages: int = 0
    scope: str = "everywhere"
    redacted: list[str] = field(default_factory=list)  # every place, in words (ScrubCounts)
    scrub_pending: str | None = None  # why the file still holds old pages, until a retry
    backups: int = 0  # copies of the profile (backups) scrubbed the same way
    unscrubbed: list[str] = field(default_factory=list)  # copies that could not be: why


@dataclass
class ForgetPreview:
    """What forgetting a memory would remove, per scope; nothing is changed."""

    memory_id: int
    text: str
    versions: list[int]  # earlier versions, forgotten with it
    needles: list[str]  # the texts matched, normalised
    broad: str | None  # why matching everywhere needs explicit confirmation, or None
    rule: str
    everywhere: list[str]  # the places, in words
    evidence: list[str]
    samples: list[str]  # a few occurrences, the match in «»
    counts: dict[str, Any] = field(default_factory=dict)  # everywhere's, by place
    kept: str | None = None  # what a forget leaves that a person may think it takes, in words
    # the sessions ``kept`` speaks of: id, title, messages (forget_kept.py)
    kept_sessions: list[dict[str, Any]] = field(default_factory=list)


def _check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise InvalidInput(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")


def _needles(chain: list[Any], scope: str) -> tuple[Matcher, set[str]]:
    """The matcher for a scope, and the normalised values whose other memories go too."""
    quotes = [r["evidence"] for r in chain if len((r["evidence"] or "").strip()) >= MIN_EVIDENCE]
    if scope == "evidence":
        return Matcher.of(quotes), set()
    values = [r["value"] for r in chain]
    matcher = Matcher.of([*values, *quotes])
    return matcher, {matcher.form(v) for v in values}


def preview_of(
    memory_id: int,
    chain: list[Any],
    wide: Matcher,
    everywhere: ScrubPlan,
    narrow: ScrubPlan,
    kept: str | None = None,
    kept_sessions: list[dict[str, Any]] | None = None,
) -> ForgetPreview:
    """The preview from the plans of both scopes (``chain``: the memory, then its versions)."""
    row = chain[0]
    broad = broad_reason(row["value"])
    if broad is None and everywhere.counts.messages > MANY_MESSAGES:
        broad = f"it occurs in {everywhere.counts.messages} messages"
    return ForgetPreview(
        memory_id=memory_id,
        text=memory_text(row),
        versions=[r["id"] for r in chain[1:]],
        needles=list(wide.needles),
        broad=broad,
        rule=MATCHING_RULE,
        everywhere=everywhere.counts.lines(),
        evidence=narrow.counts.lines(),
        samples=everywhere.samples,
        counts=asdict(everywhere.counts),
        kept=kept,
        kept_sessions=kept_sessions or [],
    )


class ForgetCommon:
    """What both backends do alike: the tombstones (their key and hashes, burying, lifting,
    checking a text against them) and what a forget would match and touch. The forget itself
    and its scrub are each backend's (ForgetOps here, pg/forget.py)."""

    # Set by whoever opened the store (the daemon, the CLI on the file): redacts the texts a
    # forget matches from copies kept outside the file (the daemon's logs). Blocking. Called by
    # every forget, however it came (a command, the inspector, the model's own tool call).
    scrub_outside: Callable[[list[str]], Any] | None = None

    async def _forget_outside(self: Store, memory_id: int, scope: str) -> list[str]:
        """Scrub the outside copies before the forget (a stop after it is saved leaves no
        retry for them: its note holds ids, and this needs the text); the needles, for after."""
        if self.scrub_outside is None:
            return []
        needles = await self.forget_needles(memory_id, scope)
        await self._scrub_outside(needles)
        return needles

    async def _scrub_outside(self: Store, needles: list[str]) -> None:
        if self.scrub_outside is not None and needles:
            await asyncio.to_thread(self.scrub_outside, needles)

    async def _tomb_key(self: Store) -> bytes:
        return bytes.fromhex(
            await self.db.scalar("SELECT value FROM meta WHERE key = 'tombstone_key'")
        )

    async def _tomb_hashes(
        self: Store, kind: str, norm_key: str | None, value: str
    ) -> tuple[str, str]:
        secret = await self._tomb_key()
        value_hash = keyed_hash(secret, f"{kind}\x1f{value}")
        fact_hash = (
            keyed_hash(secret, f"{kind}\x1f{norm_key}\x1f{value}") if norm_key else value_hash
        )
        return fact_hash, value_hash

    async def is_forgotten(
        self: Store,
        value: str,
        *,
        subject: str | None = None,
        key: str | None = None,
        kind: str = "fact",
    ) -> bool:
        """Whether this memory was forgotten before, or contains a phrase forgotten everywhere
        (extraction, tools and imports must not bring it back)."""
        norm_key = normalize_key(subject, key) if key else None
        async with self.db.reading():
            return await self._tombstoned(kind, norm_key, value) or await self._forgotten_phrase(
                [value]
            )

    async def contains_forgotten(self: Store, texts: Iterable[str | None]) -> bool:
        """Whether any of these texts contains a phrase forgotten everywhere."""
        async with self.db.reading():
            return await self._forgotten_phrase(list(texts))

    async def without_forgotten(self: Store, text: str | None) -> str | None:
        """``text`` less its sentences that state something forgotten everywhere (a summary of
        a later conversation must not learn it back); None when nothing is left."""
        if not text:
            return text
        kept = [s for s in SENTENCE.split(text) if s.strip()]
        async with self.db.reading():
            kept = [s for s in kept if not await self._forgotten_phrase([s])]
        return " ".join(s.strip() for s in kept) or None

    async def _chain(self: Store, memory_id: int) -> list[Any]:
        # The versions this one replaced are the same memory (each once, even if an imported
        # file linked them in a loop).
        rows = [await self._row(memory_id), *await self._older_versions(memory_id)]
        return list({r["id"]: r for r in rows}.values())

    async def forget_needles(self: Store, memory_id: int, scope: str = "everywhere") -> list[str]:
        """The texts a forget in ``scope`` matches (normalised): for scrubbing files outside
        the database, such as logs, the same way."""
        _check_scope(scope)
        async with self.db.reading():
            return list(_needles(await self._chain(memory_id), scope)[0].needles)

    async def forget_preview(self: Store, memory_id: int) -> ForgetPreview:
        """Where else the memory's value and evidence occur, for each scope; changes nothing."""
        async with self.db.reading():
            chain = await self._chain(memory_id)
            ids = {r["id"] for r in chain}
            wide, same = _needles(chain, "everywhere")
            everywhere = await self._plan_scrub(wide, ids, same, samples=5)
            narrow = await self._plan_scrub(_needles(chain, "evidence")[0], ids, set())
            kept, sessions = await kept_after(self.db, chain, self.profile)
        return preview_of(memory_id, chain, wide, everywhere, narrow, kept, sessions)

    # -- tombstones ----------------------------------------------------------------------------

    async def _tombstoned(self: Store, kind: str, norm_key: str | None, value: str) -> bool:
        fact_hash, value_hash = await self._tomb_hashes(kind, norm_key, value)
        return bool(
            await self.db.scalar(
                "SELECT 1 FROM tombstones WHERE fact_hash = ? OR value_hash = ?",
                (fact_hash, value_hash),
            )
        )

    async def _bury_phrases(self: Store, texts: Iterable[str]) -> None:
        secret = await self._tomb_key()
        rows = []
        for text in texts:
            for phrase in phrase_forms(text):
                words = len(phrase.split(" "))
                if phrase and words <= MAX_PHRASE_WORDS:
                    rows.append((keyed_hash(secret, f"phrase\x1f{phrase}"), words, now_iso()))
        await self.db.executemany(
            "INSERT INTO forgotten_phrases (hash, words, created_at) VALUES (?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            rows,
        )

    async def _forgotten_phrase(self: Store, texts: Iterable[str | None]) -> bool:
        """Whether any text contains a phrase forgotten everywhere (as whole words)."""
        return bool(await self._forgotten_phrases(texts, first=True))

    async def redact_forgotten_since(self: Store, text: str, said_at: str) -> str:
        """``text`` with the phrases forgotten everywhere after ``said_at`` redacted: a
        message said before a forget and arriving after it (the outbox of a machine that was
        away from the memory server). What is said after a forget is kept as said."""
        async with self.db.reading():
            found = await self._forgotten_phrases([text], since=said_at)
        redacted, _ = Matcher.of_phrases(found).redact(text) if found else (text, 0)
        return redacted if redacted is not None else text

    async def _redacted_since(
        self: Store, said_at: str, content: str, meta: dict[str, Any] | None, raw: str | None
    ) -> tuple[str, str | None]:
        """A message said at ``said_at`` and saved now (a reply streamed, a tool's result), its
        content and its meta as stored (``raw``), with what was forgotten everywhere meanwhile
        redacted: the forget's scrub ran before it was saved. Run in the save's transaction,
        so that no forget comes between. One small look when nothing was forgotten since."""
        # A generator: the meta's strings are walked only when something was forgotten since.
        texts = itertools.chain([content], strings_in(meta) if meta else ())
        found = await self._forgotten_phrases(texts, since=said_at)
        if not found:
            return content, raw
        matcher = Matcher.of_phrases(found)
        return matcher.redact(content)[0] or content, matcher.redact_json(raw)[0]

    async def _forgotten_phrases(
        self: Store, texts: Iterable[str | None], *, since: str | None = None, first: bool = False
    ) -> list[str]:
        """The phrases of ``texts`` forgotten everywhere (after ``since``), found by their
        keyed hashes; with ``first``, no more than the first batch that has one."""
        when = " AND created_at > ?" if since is not None else ""
        after = [since] if since is not None else []
        lengths = [
            r[0]
            for r in await self.db.fetchall(
                "SELECT DISTINCT words FROM forgotten_phrases"
                + (" WHERE created_at > ?" if after else ""),
                after,
            )
        ]
        if not lengths:
            return []
        secret = await self._tomb_key()
        by_hash = {
            keyed_hash(secret, f"phrase\x1f{p}"): p for t in texts if t for p in phrases(t, lengths)
        }
        ordered = sorted(by_hash)
        found: list[str] = []
        for start in range(0, len(ordered), PHRASE_CHUNK):  # a server's statement: 32,767 at most
            part = ordered[start : start + PHRASE_CHUNK]
            rows = await self.db.fetchall(
                f"SELECT hash FROM forgotten_phrases WHERE hash IN ({','.join('?' * len(part))})"
                f"{when}{' LIMIT 1' if first else ''}",
                [*part, *after],
            )
            found += [by_hash[r[0]] for r in rows]
            if first and found:
                break
        return found

    async def _lift_tombstones(self: Store, kind: str, norm_key: str | None, value: str) -> None:
        """The user saying it again, by hand, lifts its tombstones."""
        fact_hash, value_hash = await self._tomb_hashes(kind, norm_key, value)
        await self.db.execute(
            "DELETE FROM tombstones WHERE fact_hash = ? OR value_hash = ?", (fact_hash, value_hash)
        )
        secret = await self._tomb_key()
        await self.db.execute(
            "DELETE FROM forgotten_phrases WHERE hash = ?",
            (keyed_hash(secret, f"phrase\x1f{phrase_of(value)}"),),
        )


class ForgetOps(ForgetCommon, CopyScrubOps, ScrubOps):
    def _needles_for(self, rows: list[Any], scope: str) -> tuple[Matcher, set[str]]:
        return _needles(rows, scope)

    # -- forget --------------------------------------------------------------------------------

    async def forget(
        self: MemoryStore, memory_id: int, actor: str = "user", *, scope: str = "everywhere"
    ) -> ForgetReport:
        """Remove a memory and every trace (see the module's docstring for the scopes): its
        earlier versions, history, index terms, vectors, entity links, ledger rows, and the
        text wherever it was copied, in this file and in the profile's backups. Keyed hashes
        (tombstones) stop it from coming back; the file keeps no copy of the text once the
        write-ahead log is folded in."""
        _check_scope(scope)
        report = ForgetReport(scope=scope)
        outside = await self._forget_outside(memory_id, scope)
        async with self.db.transaction():
            chain = await self._chain(memory_id)
            matcher, same = _needles(chain, scope)
            report.forgotten, counts = await self._forget_rows(chain, matcher, same)
            report.redacted_messages = counts.messages
            report.redacted = counts.lines()
            # Saved with the forget: a full disk or a crash before the purge below finishes
            # leaves it to retry_scrubs; one before the copies are done, to the copies' retry.
            await self._note_pending(report.forgotten, UNFINISHED)
            await self._note_copies_pending([r["id"] for r in chain], scope)
        report.scrub_pending = await self._purge_free_space(
            report.forgotten, messages=report.redacted_messages > 0
        )
        await self._scrub_copies([r["id"] for r in chain], report, (matcher, same))
        await self._scrub_outside(outside)
        return report

    async def _forget_rows(
        self: MemoryStore, chain: list[Any], matcher: Matcher, same: set[str]
    ) -> tuple[list[int], ScrubCounts]:
        """Tombstone and delete ``chain`` (and memories with the same value), redact every
        other occurrence; inside a transaction. Returns the ids deleted and where it redacted."""
        plan = await self._plan_scrub(matcher, {r["id"] for r in chain}, same)
        gone = [*chain, *plan.also_forgotten]
        for row in gone:
            fact_hash, value_hash = await self._tomb_hashes(
                row["kind"], row["norm_key"], row["value"]
            )
            await self.db.execute(
                "INSERT OR IGNORE INTO tombstones (fact_hash, value_hash, kind, created_at)"
                " VALUES (?, ?, ?, ?)",
                (fact_hash, value_hash, row["kind"], now_iso()),
            )
            await self._unindex_memory(row["id"])
        await self._bury_phrases(matcher.needles)
        gone_ids = [r["id"] for r in gone]
        if gone_ids:
            marks = ",".join("?" * len(gone_ids))
            await self.db.execute(
                f"UPDATE memories SET superseded_by = NULL WHERE superseded_by IN ({marks})",
                gone_ids,
            )
            await self.db.execute(f"DELETE FROM memories WHERE id IN ({marks})", gone_ids)
        await self._apply_scrub(plan)
        await self._drop_orphan_entities()
        await self._mark_profile_stale()
        return gone_ids, plan.counts
