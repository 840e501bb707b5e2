"""Background jobs: expiry, decay and prune, the planner's statistics, and the embedding pass
(backfill and re-embedding)."""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from navi_desktop.errors import NaviError
from navi_desktop.memory.clock import check_iso, iso, now_iso, parse_iso
from navi_desktop.memory.documents import memory_text, message_text, text_digest
from navi_desktop.memory.embedders import BadVector
from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.sessions import MESSAGE_COLUMNS

log = logging.getLogger(__name__)
GARBAGE = "NaN, infinity, zeros, none or the wrong size"
SIZE_CHECK = "size"  # the text a model is asked to embed to learn its vectors' size
# Machines sharing a profile may embed with different models: one's vectors go only once no
# machine has made one with it for this many days.
UNUSED_MODEL_DAYS = 30

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store
    from navi_desktop.memory.store import MemoryStore


@dataclass(frozen=True)
class DecayPolicy:
    """Ebbinghaus forgetting curve: retention = exp(-days / stability), where stability grows
    with each repetition. Below ``archive_below`` an unpinned fact is archived (never deleted)."""

    stability_days: float = 45.0
    archive_below: float = 0.05


@dataclass
class DecayReport:
    updated: int = 0
    archived: list[int] | None = None


def decay_step(row: Any, when: datetime, policy: DecayPolicy) -> tuple[str, float]:
    """What decay does to an unpinned active fact (``mentions``, ``strength``, ``seen``: last
    use or update) at ``when``: "archive", "fade" (to the new strength) or "keep"."""
    days = max(0.0, (when - parse_iso(row["seen"])).total_seconds() / 86400)
    retention = math.exp(-days / (policy.stability_days * max(1, row["mentions"])))
    if retention < policy.archive_below:
        return "archive", retention
    if abs(retention - row["strength"]) > 1e-6:
        return "fade", retention
    return "keep", retention


class FadingOps:
    """Recall, expiry and the forgetting curve, one copy for both backends (the server locks
    the rows it reads first: ROW_LOCK)."""

    async def touch(self: Store, memory_ids: list[int]) -> None:
        """Memories were used (put into a prompt): recall strengthens them."""
        if not memory_ids:
            return
        async with self.db.transaction():
            await self._mark_used(memory_ids, now_iso())

    async def _mark_used(self: Store, memory_ids: list[int], at: str) -> None:
        await self.db.executemany(
            "UPDATE memories SET last_used_at = ?, strength = 1.0 WHERE id = ?",
            [(at, i) for i in memory_ids],
        )

    async def archive_expired(self: Store, *, now: str | None = None) -> list[int]:
        """Archive (never delete) the current facts whose expiry has passed, pinned ones too:
        an expiry is the user's word that it stops being true. Each gets a history row."""
        when = check_iso(now, "now") if now else now_iso()
        async with self.db.transaction():
            rows = await self.db.fetchall(
                "SELECT id, status, expires_at FROM memories WHERE expires_at IS NOT NULL"
                f" AND expires_at <= ? AND status IN ('active', 'held') ORDER BY id{self.ROW_LOCK}",
                (when,),
            )
            for row in rows:
                await self._archive_by_system(
                    row["id"], row["status"], "it expired", expires_at=row["expires_at"]
                )
            if rows:
                await self._mark_profile_stale()
        return [r["id"] for r in rows]

    async def decay(
        self: Store, *, now: str | None = None, policy: DecayPolicy = DecayPolicy()
    ) -> DecayReport:
        """Archive what expired, then let the rest fade along the forgetting curve."""
        when = parse_iso(now or now_iso())
        report = DecayReport(archived=await self.archive_expired(now=now))
        async with self.db.transaction():
            rows = await self.db.fetchall(
                "SELECT id, mentions, strength, coalesce(last_used_at, updated_at) AS seen"
                " FROM memories WHERE kind = 'fact' AND status = 'active' AND pinned = 0"
                f" ORDER BY id{self.ROW_LOCK}"
            )
            faded: list[tuple[float, int]] = []
            for row in rows:
                step, retention = decay_step(row, when, policy)
                if step == "archive":
                    await self.db.execute(
                        "UPDATE memories SET strength = ?, status = 'archived', updated_at = ?"
                        " WHERE id = ?",
                        (retention, now_iso(), row["id"]),
                    )
                    await self._history(
                        row["id"],
                        "archive",
                        "decay",
                        old={"status": "active"},
                        new={"status": "archived", "strength": retention},
                    )
                    report.archived.append(row["id"])
                elif step == "fade":
                    faded.append((retention, row["id"]))
            await self.db.executemany("UPDATE memories SET strength = ? WHERE id = ?", faded)
            report.updated = len(faded)
            if report.archived:
                await self._mark_profile_stale()
        return report


class MaintenanceOps:
    async def optimize(self: MemoryStore) -> None:
        """Refresh the query planner's statistics where the tables have changed much (run by
        the periodic maintenance: the daemon's connection lives for days)."""
        async with self.db.reading():
            await self.db.execute("PRAGMA optimize")


class EmbeddingPassOps:
    """The vectors, written after the text (outside any lock while the model works), one copy
    for both backends: each stores them its own way (``_store_vectors``: the file int8 copies
    and sign bits, the server float vectors)."""

    # Why the last pass left texts without a vector (a model's garbage), for the daemon's
    # status; None once a pass embeds all it was asked.
    embedding_problem: str | None = None
    # (model, size): the size of the vectors that model gave this store last (a query's, a
    # batch's, or _learn_size's). That is the profile's current size: a vector of the model
    # of another size counts as missing (a model may change its size under the same name).
    _model_size: tuple[str, int] | None = None

    # A memory server's profile is shared by machines whose models of one name may differ in
    # size (one upgraded, one not yet): there a vector of another size is another machine's,
    # not stale, and making it again would start the two re-embedding each other's for good.
    shares_vectors = False

    def _known_size(self: Store) -> int | None:
        """The current model's vector size, as it last answered this store (None: not yet,
        or a memory server's profile, where the pass goes by the model's name alone)."""
        held = self._model_size
        if self.shares_vectors or not held or not self.embedder:
            return None
        return held[1] if held[0] == self.embedder.model else None

    def _heard_size(self: Store, size: int) -> None:
        assert self.embedder is not None
        self._model_size = (self.embedder.model, size)

    async def _learn_size(self: Store) -> None:
        """Ask the current model for one vector when this store has not heard its size yet
        and the profile holds vectors of it to check. Without an answer the pass goes by the
        model's name alone, as it does when nothing is held."""
        assert self.embedder is not None
        if self.shares_vectors or self._known_size() is not None:  # no use for it, or known
            return
        if (fixed := getattr(self.embedder, "dim", None)) is not None:  # the offline model
            self._heard_size(fixed)
            return
        async with self.db.reading():
            held = await self.db.scalar(
                "SELECT 1 FROM embeddings WHERE model = ? LIMIT 1", (self.embedder.model,)
            )
        if held is None:
            return
        try:
            vectors = await self.embedder.embed([SIZE_CHECK], query=False)
        except (NaviError, OSError, TimeoutError) as exc:  # nothing else may need the model
            log.info("the size of %s's vectors is not known: %s", self.embedder.model, exc)
            return
        self._heard_size(int(np.asarray(vectors).shape[1]))

    async def backfill_embeddings(
        self: Store, *, batch: int = 32, limit: int | None = None, messages: bool = True
    ) -> int:
        """Embed what has no vector of the current model and size (memories first, then
        messages unless ``messages`` is false), replacing a vector of another size; when
        nothing is left, drop vectors of earlier models and sizes. Text search works
        throughout. Returns how many texts were embedded."""
        if self.embedder is None:
            return 0
        model, done = self.embedder.model, 0
        await self._learn_size()
        targets = [
            (
                "memory_id",
                "memories",
                MEMORY_COLUMNS,
                memory_text,
                "status IN ('active', 'held') AND",
            )
        ]
        if messages:
            targets.append(("message_id", "messages", MESSAGE_COLUMNS, message_text, ""))
        skipped = 0
        for column, table, columns, render, where in targets:
            after = 0  # onwards by id: a text the model gives no vector is not asked twice a pass
            while limit is None or done < limit:
                size = batch if limit is None else min(batch, limit - done)
                async with self.db.reading():
                    # The size as the model last answered: one that changes during the pass
                    # counts from the next batch on (what was passed over waits for the next).
                    rows = await self.db.fetchall(
                        f"SELECT {columns} FROM {table} t WHERE {where} NOT EXISTS (SELECT 1 FROM"
                        f" embeddings e WHERE e.{column} = t.id AND e.model = ? AND e.dim ="
                        " coalesce(?, e.dim)) AND t.id > ? ORDER BY id LIMIT ?",
                        (model, self._known_size(), after, size),
                    )
                if not rows:
                    break
                after = rows[-1]["id"]
                texts = [render(r) for r in rows]
                vectors, usable = await self._embed_passages(texts)
                if not usable:  # the model, not a text: asked text by text no further
                    problem = f"{model} returns no usable vectors ({GARBAGE})"
                    self.embedding_problem = problem
                    raise BadVector(problem)
                skipped += len(texts) - len(usable)
                hashes = [text_digest(t) for t in texts]
                async with self.db.transaction():
                    # a row edited or deleted while we embedded keeps no stale vector
                    now = await self.db.fetchall(
                        f"SELECT {columns} FROM {table} WHERE id IN ({','.join('?' * len(rows))})",
                        [r["id"] for r in rows],
                    )
                    current = {r["id"]: text_digest(render(r)) for r in now}
                    keep = [i for i in usable if current.get(rows[i]["id"]) == hashes[i]]
                    await self._store_vectors(
                        column,
                        [rows[i]["id"] for i in keep],
                        [hashes[i] for i in keep],
                        vectors[keep],
                    )
                # Edited meanwhile (not deleted): embedded again from there.
                edited = [
                    rows[i]["id"] for i in usable if i not in keep and rows[i]["id"] in current
                ]
                if edited:
                    after = min(after, edited[0] - 1)
                done += len(rows)
        self.embedding_problem = None
        if skipped:
            texts = "a text" if skipped == 1 else f"{skipped} texts"
            self.embedding_problem = f"{model} gave no usable vector for {texts} ({GARBAGE})"
            log.warning("%s: they stay findable by their words", self.embedding_problem)
        if await self.missing_embeddings() == 0:  # archived memories' vectors go too
            await self._drop_other_vectors(model)
        return done

    async def _drop_other_vectors(self: Store, model: str) -> None:
        """Vectors of other models, or of another size than the model's now. Written as
        ranges so the (model, dim) index finds them: `model != ?` read the whole table, in
        a write transaction, at the end of every pass (after every memory written)."""
        if self.shares_vectors:  # perhaps another machine's model: see drop_unused_models
            return
        other, args = "model < ? OR model > ?", [model, model]
        if (size := self._known_size()) is not None:
            other += " OR (model = ? AND dim < ?) OR (model = ? AND dim > ?)"
            args += [model, size, model, size]
        async with self.db.transaction():
            await self.db.execute(f"DELETE FROM embeddings WHERE {other}", tuple(args))

    async def drop_unused_models(self: Store, *, now: str | None = None) -> int:
        """On a shared profile (``shares_vectors``), the vectors of each model other than
        this machine's that no machine has made one with for UNUSED_MODEL_DAYS: a model given
        up. The daily maintenance runs it, not each pass: it reads every vector's date.
        Returns how many vectors went."""
        if not self.shares_vectors:
            return 0  # a file's pass drops other models' vectors as soon as it is done
        mine = self.embedder.model if self.embedder else None
        cutoff = iso(parse_iso(now or now_iso()) - timedelta(days=UNUSED_MODEL_DAYS))
        async with self.db.transaction():
            unused = [
                (model, count)
                for model, count in await self.db.fetchall(
                    "SELECT model, count(*) FROM embeddings GROUP BY model"
                    " HAVING max(created_at) < ?",
                    (cutoff,),
                )
                if model != mine
            ]
            for model, _ in unused:
                await self.db.execute("DELETE FROM embeddings WHERE model = ?", (model,))
        return sum(count for _, count in unused)

    async def _embed_passages(self: Store, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """Vectors for ``texts`` and the indexes of those that are vectors. A batch with
        garbage in it (BadVector) is asked again one text at a time, so one text a model
        cannot embed holds up no other."""
        assert self.embedder is not None
        try:
            vectors = np.asarray(await self.embedder.embed(texts, query=False), np.float32)
            self._heard_size(vectors.shape[1])
            return vectors, list(range(len(texts)))
        except BadVector as exc:
            log.info("embedding one at a time: %s", exc)
        found: dict[int, np.ndarray] = {}
        for i, text in enumerate(texts):
            try:
                found[i] = np.asarray(await self.embedder.embed([text], query=False), np.float32)[0]
            except BadVector:
                continue
        # One size a call, another the next: the texts keep theirs at the profile's current
        # size, else at the size most of them came back at; the odd ones get no vector.
        sizes = Counter(len(v) for v in found.values())
        dim = self._known_size() or 0
        if dim not in sizes:
            dim = sizes.most_common(1)[0][0] if sizes else 1
        out = np.zeros((len(texts), dim), np.float32)
        for i, vector in list(found.items()):
            if len(vector) == dim:
                out[i] = vector
            else:
                del found[i]
        if found:
            self._heard_size(dim)
        return out, list(found)
