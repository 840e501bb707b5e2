"""Schema changes as small named steps, each applied once and recorded in ``schema_migrations``.

A file made by any earlier version upgrades in place: steps already recorded are skipped,
the rest run in order, each in its own transaction together with its record.
Never edit a released step; add a new one.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

import sqlean

from navi_desktop.errors import ProfileError, ProfileTooNew
from navi_desktop.memory.db import APPLICATION_ID, Database
from navi_desktop.memory.documents import memory_document, message_documents
from navi_desktop.memory.filecheck import new_file_id
from navi_desktop.memory.vectors import int8_from_float32

Step = Callable[[Database], Awaitable[None]]


async def _script(db: Database, sql: str) -> None:
    for statement in filter(str.strip, sql.split(";\n")):
        await db.execute(statement)


async def m0001_core(db: Database) -> None:
    await _script(
        db,
        """
        CREATE TABLE meta (
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        CREATE TABLE sessions (
            id             TEXT PRIMARY KEY,
            title          TEXT,
            created_at     TEXT NOT NULL,
            last_active_at TEXT NOT NULL,
            state          TEXT NOT NULL DEFAULT 'open'
                           CHECK (state IN ('open', 'pending', 'ended')),
            processed_upto INTEGER NOT NULL DEFAULT 0,
            pending_reason TEXT,
            attempts       INTEGER NOT NULL DEFAULT 0,
            next_attempt_at TEXT,
            ended_at       TEXT
        );
        CREATE TABLE messages (
            id         INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            role       TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
            name       TEXT,
            content    TEXT NOT NULL,
            created_at TEXT NOT NULL,
            meta       TEXT
        );
        CREATE INDEX messages_by_session ON messages (session_id, id);
        CREATE TABLE memories (
            id            INTEGER PRIMARY KEY,
            kind          TEXT NOT NULL CHECK (kind IN ('fact', 'episode', 'rule', 'reflection')),
            category      TEXT,
            subject       TEXT,
            key           TEXT,
            norm_key      TEXT,
            value         TEXT NOT NULL,
            evidence      TEXT,
            source        TEXT NOT NULL CHECK (source IN
                          ('conversation', 'tool_call', 'user_explicit', 'auto_discovery', 'import')),
            confidence    REAL NOT NULL DEFAULT 1.0 CHECK (confidence BETWEEN 0 AND 1),
            session_id    TEXT REFERENCES sessions(id) ON DELETE SET NULL,
            message_from  INTEGER,
            message_to    INTEGER,
            status        TEXT NOT NULL DEFAULT 'active'
                          CHECK (status IN ('active', 'held', 'archived', 'superseded')),
            pinned        INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),
            strength      REAL NOT NULL DEFAULT 1.0,
            mentions      INTEGER NOT NULL DEFAULT 1,
            created_at    TEXT NOT NULL,
            updated_at    TEXT NOT NULL,
            last_used_at  TEXT,
            valid_from    TEXT NOT NULL,
            valid_to      TEXT,
            superseded_by INTEGER REFERENCES memories(id) ON DELETE SET NULL
        );
        CREATE INDEX memories_by_kind ON memories (kind, status, category);
        CREATE INDEX memories_by_key ON memories (norm_key) WHERE norm_key IS NOT NULL;
        CREATE INDEX memories_by_session ON memories (session_id);
        CREATE TABLE memory_history (
            id        INTEGER PRIMARY KEY,
            memory_id INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
            action    TEXT NOT NULL,
            actor     TEXT NOT NULL,
            at        TEXT NOT NULL,
            old       TEXT,
            new       TEXT
        );
        CREATE INDEX memory_history_by_memory ON memory_history (memory_id, id);
        CREATE TABLE tombstones (
            fact_hash  TEXT PRIMARY KEY,
            value_hash TEXT NOT NULL,
            kind       TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX tombstones_by_value ON tombstones (value_hash)
        """,
    )
    now = datetime.now(UTC).isoformat(timespec="seconds")
    await db.execute("INSERT INTO meta (key, value) VALUES ('created_at', ?)", (now,))
    # Secret for tombstone hashes, so a hash cannot be checked against guessed text elsewhere.
    await db.execute(
        "INSERT INTO meta (key, value) VALUES ('tombstone_key', ?)", (secrets.token_hex(32),)
    )


async def m0002_full_text(db: Database) -> None:
    # Contentless tables: the text lives once, in memories/messages; the index holds only terms.
    # Rows are kept in sync by the engine, which segments CJK text before indexing it.
    tokenizer = "porter unicode61 remove_diacritics 2"
    await db.execute(
        "CREATE VIRTUAL TABLE memories_fts USING fts5("
        f"text, evidence, content='', contentless_delete=1, tokenize='{tokenizer}')"
    )
    await db.execute(
        "CREATE VIRTUAL TABLE messages_fts USING fts5("
        f"body, context, content='', contentless_delete=1, tokenize='{tokenizer}')"
    )
    for row in await db.fetchall("SELECT * FROM memories"):
        await db.execute(
            "INSERT INTO memories_fts (rowid, text, evidence) VALUES (?, ?, ?)",
            (row["id"], *memory_document(row)),
        )
    for session in await db.fetchall("SELECT id FROM sessions"):
        rows = await db.fetchall(
            "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (session["id"],)
        )
        prev = None
        for row in rows:
            await db.execute(
                "INSERT INTO messages_fts (rowid, body, context) VALUES (?, ?, ?)",
                (row["id"], *message_documents(row, prev)),
            )
            prev = row


async def m0003_embeddings(db: Database) -> None:
    await _script(
        db,
        """
        CREATE TABLE embeddings (
            id           INTEGER PRIMARY KEY,
            memory_id    INTEGER REFERENCES memories(id) ON DELETE CASCADE,
            message_id   INTEGER REFERENCES messages(id) ON DELETE CASCADE,
            model        TEXT NOT NULL,
            dim          INTEGER NOT NULL,
            content_hash TEXT NOT NULL,
            vector       BLOB NOT NULL,
            bits         BLOB NOT NULL,
            created_at   TEXT NOT NULL,
            CHECK ((memory_id IS NULL) != (message_id IS NULL))
        );
        CREATE UNIQUE INDEX embeddings_by_memory ON embeddings (memory_id, model)
            WHERE memory_id IS NOT NULL;
        CREATE UNIQUE INDEX embeddings_by_message ON embeddings (message_id, model)
            WHERE message_id IS NOT NULL;
        CREATE INDEX embeddings_by_model ON embeddings (model)
        """,
    )


async def m0004_entities(db: Database) -> None:
    await _script(
        db,
        """
        CREATE TABLE entities (
            id   INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            norm TEXT NOT NULL UNIQUE
        );
        CREATE TABLE entity_links (
            entity_id  INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            memory_id  INTEGER REFERENCES memories(id) ON DELETE CASCADE,
            message_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
            CHECK ((memory_id IS NULL) != (message_id IS NULL))
        );
        CREATE UNIQUE INDEX entity_links_memory ON entity_links (entity_id, memory_id)
            WHERE memory_id IS NOT NULL;
        CREATE UNIQUE INDEX entity_links_message ON entity_links (entity_id, message_id)
            WHERE message_id IS NOT NULL;
        CREATE INDEX entity_links_by_memory ON entity_links (memory_id);
        CREATE INDEX entity_links_by_message ON entity_links (message_id)
        """,
    )


async def m0005_injection_ledger(db: Database) -> None:
    await _script(
        db,
        """
        CREATE TABLE injections (
            id         INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            message_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
            memory_id  INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
            rank       INTEGER NOT NULL,
            score      REAL NOT NULL,
            signals    TEXT NOT NULL,
            at         TEXT NOT NULL
        );
        CREATE INDEX injections_by_message ON injections (message_id);
        CREATE INDEX injections_by_memory ON injections (memory_id)
        """,
    )


async def m0006_review_reason(db: Database) -> None:
    # Why a memory waits in the review inbox (sensitive, uncertain, needs repetition).
    await db.execute("ALTER TABLE memories ADD COLUMN review_reason TEXT")


async def m0007_unkeyed_value_index(db: Database) -> None:
    # Duplicate checks for memories without a key look them up by text.
    await db.execute(
        "CREATE INDEX memories_unkeyed_by_value ON memories (kind, value COLLATE NOCASE)"
        " WHERE norm_key IS NULL"
    )


async def m0008_memory_ids_never_reused(db: Database) -> None:
    # A forgotten memory's id must never name another one (`navi memory forget 11` typed again
    # from shell history). AUTOINCREMENT needs the table rebuilt: SQLite's own procedure, with
    # foreign keys off (see NO_FOREIGN_KEYS), so that no history row cascades away. Ids are
    # copied as they are; the sequence starts from the highest one.
    sql = await db.scalar(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'memories'"
    )
    if "AUTOINCREMENT" in sql.upper():
        return
    indexes = await db.fetchall(
        "SELECT sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'memories'"
        " AND sql IS NOT NULL"
    )
    new = sql.replace("memories", "memories_rebuilt", 1)
    new = new.replace("INTEGER PRIMARY KEY", "INTEGER PRIMARY KEY AUTOINCREMENT", 1)
    await db.execute(new)
    await db.execute("INSERT INTO memories_rebuilt SELECT * FROM memories")
    await db.execute("DROP TABLE memories")
    await db.execute("ALTER TABLE memories_rebuilt RENAME TO memories")
    for index in indexes:
        await db.execute(index["sql"])
    broken = await db.fetchall("PRAGMA foreign_key_check")
    if broken:
        raise RuntimeError(f"rebuilding the memories table broke {len(broken)} references")


async def m0009_forgotten_phrases(db: Database) -> None:
    # Keyed hashes of values forgotten everywhere, by their word count: a tool call, an import or
    # extraction cannot bring such a value back inside other text (see memory/forget.py).
    await db.execute(
        "CREATE TABLE forgotten_phrases ("
        "hash TEXT PRIMARY KEY, words INTEGER NOT NULL, created_at TEXT NOT NULL)"
    )


async def m0010_reply_feedback(db: Database) -> None:
    # One rating per reply; turn_id is the user message whose injections the reply used.
    await _script(
        db,
        """
        CREATE TABLE reply_feedback (
            message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            turn_id    INTEGER REFERENCES messages(id) ON DELETE SET NULL,
            rating     INTEGER NOT NULL CHECK (rating IN (-1, 1)),
            note       TEXT,
            at         TEXT NOT NULL
        );
        CREATE INDEX reply_feedback_by_turn ON reply_feedback (turn_id);
        CREATE INDEX reply_feedback_by_time ON reply_feedback (at)
        """,
    )


async def m0011_entity_types_and_aliases(db: Database) -> None:
    # A type and other names for an entity; which memories the model has read for entities.
    await _script(
        db,
        """
        ALTER TABLE entities ADD COLUMN type TEXT
            CHECK (type IN ('person', 'organisation', 'project', 'location', 'other'));
        CREATE TABLE entity_aliases (
            entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            name      TEXT NOT NULL,
            norm      TEXT NOT NULL UNIQUE
        );
        CREATE INDEX entity_aliases_by_entity ON entity_aliases (entity_id);
        CREATE TABLE entities_enriched (
            memory_id INTEGER PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
            model     TEXT NOT NULL,
            at        TEXT NOT NULL
        )
        """,
    )


async def m0012_expiry_and_verification(db: Database) -> None:
    # A fact that holds until a time ("in Berlin until Friday"), and when the user last said a
    # fact is still true. Both NULL: never expires, never confirmed. The partial index serves
    # maintenance, which archives what has expired.
    await db.execute("ALTER TABLE memories ADD COLUMN expires_at TEXT")
    await db.execute("ALTER TABLE memories ADD COLUMN last_verified_at TEXT")
    await db.execute(
        "CREATE INDEX memories_expiring ON memories (expires_at) WHERE expires_at IS NOT NULL"
    )


async def m0013_int8_vectors(db: Database) -> None:
    # Vectors are kept as int8 copies (vectors.py), a quarter of float32's size. The table is
    # copied (ids kept) rather than updated in place: a row made smaller in place keeps its
    # page (a float32 row filled one), so the file would keep the float32 size for good; the
    # old table's pages become free pages that later writes reuse.
    sql = await db.scalar("SELECT sql FROM sqlite_schema WHERE name = 'embeddings'")
    indexes = await db.fetchall(
        "SELECT sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'embeddings'"
        " AND sql IS NOT NULL"
    )
    await db.execute(sql.replace("embeddings", "embeddings_int8", 1))
    last = 0
    while rows := await db.fetchall(
        "SELECT * FROM embeddings WHERE id > ? ORDER BY id LIMIT 5000", (last,)
    ):
        last = rows[-1]["id"]
        floats = [i for i, r in enumerate(rows) if len(r["vector"]) == r["dim"] * 4]
        vectors = [r["vector"] for r in rows]  # another length: copied as it is (doctor)
        for i, code in zip(floats, int8_from_float32([vectors[i] for i in floats]), strict=True):
            vectors[i] = code
        columns = rows[0].keys()
        at = columns.index("vector")
        await db.executemany(
            f"INSERT INTO embeddings_int8 ({', '.join(columns)})"
            f" VALUES ({', '.join('?' * len(columns))})",
            [(*r[:at], vec, *r[at + 1 :]) for r, vec in zip(rows, vectors, strict=True)],
        )
    await db.execute("DROP TABLE embeddings")
    await db.execute("ALTER TABLE embeddings_int8 RENAME TO embeddings")
    for index in indexes:
        await db.execute(index["sql"])


async def m0014_file_id(db: Database) -> None:
    # A random id in the file's header, which every commit also writes into the log
    # (filecheck.STAMP): a log beside the file that shows another id is another file's.
    if not await db.scalar("PRAGMA user_version"):
        await db.execute(f"PRAGMA user_version = {new_file_id()}")


async def m0015_vector_size_in_indexes(db: Database) -> None:
    # Whether each memory and message has a vector of the current model at its current size
    # (the daemon asks after each memory write, the embedding pass at each batch) is answered
    # from the owner indexes alone once they hold the size: without it, each text cost a read
    # of its vector's row (1M memories + 1M messages: 1.64 s, now 0.49 s). Still one vector
    # per text and model: the store deletes the old one in the transaction that inserts the
    # new (MemoryStore._store_vectors). The model index takes the size too, so that the
    # vectors of other models and sizes are counted or found without reading the table.
    await _script(
        db,
        """
        DROP INDEX IF EXISTS embeddings_by_memory;
        CREATE UNIQUE INDEX embeddings_by_memory ON embeddings (memory_id, model, dim)
            WHERE memory_id IS NOT NULL;
        DROP INDEX IF EXISTS embeddings_by_message;
        CREATE UNIQUE INDEX embeddings_by_message ON embeddings (message_id, model, dim)
            WHERE message_id IS NOT NULL;
        DROP INDEX IF EXISTS embeddings_by_model;
        CREATE INDEX embeddings_by_model ON embeddings (model, dim)
        """,
    )


MIGRATIONS: list[tuple[str, Step]] = [
    ("0001_core", m0001_core),
    ("0002_full_text", m0002_full_text),
    ("0003_embeddings", m0003_embeddings),
    ("0004_entities", m0004_entities),
    ("0005_injection_ledger", m0005_injection_ledger),
    ("0006_review_reason", m0006_review_reason),
    ("0007_unkeyed_value_index", m0007_unkeyed_value_index),
    ("0008_memory_ids_never_reused", m0008_memory_ids_never_reused),
    ("0009_forgotten_phrases", m0009_forgotten_phrases),
    ("0010_reply_feedback", m0010_reply_feedback),
    ("0011_entity_types_and_aliases", m0011_entity_types_and_aliases),
    ("0012_expiry_and_verification", m0012_expiry_and_verification),
    ("0013_int8_vectors", m0013_int8_vectors),
    ("0014_file_id", m0014_file_id),
    ("0015_vector_size_in_indexes", m0015_vector_size_in_indexes),
]
# Steps that rebuild a table: foreign keys are off around them (a transaction ignores the pragma).
NO_FOREIGN_KEYS = {"0008_memory_ids_never_reused"}
# Steps a file can be read without (a read-only open does not refuse a file that lacks them):
# they change nothing that a read looks at.
READ_WITHOUT = {"0014_file_id", "0015_vector_size_in_indexes"}


def schema_version(names: Iterable[str]) -> int:
    """The number of the newest step among ``names`` ("0007_..." is 7); 0 for none."""
    numbers = [int(n[:4]) for n in names if n[:4].isdigit()]
    return max(numbers, default=0)


def _recorded(conn: sqlean.Connection) -> list[str]:
    """The steps a file records as applied (none for a new file)."""
    if not conn.execute(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone():
        return []
    return [r[0] for r in conn.execute("SELECT name FROM schema_migrations")]


def check_schema(conn: sqlean.Connection, path: Path) -> list[str]:
    """Refuse a file a newer Navi wrote (steps this version does not know): it is never
    migrated down nor written. Runs on a read-only connection before anything else; returns
    the steps the file records."""
    recorded = _recorded(conn)
    known = [name for name, _ in MIGRATIONS]
    unknown = sorted(set(recorded) - set(known))
    if unknown:
        raise ProfileTooNew(
            f"{path} was written by a newer version of Navi (memory schema"
            f" {schema_version(recorded)}; this version knows up to {schema_version(known)});"
            " it was left untouched: update Navi to use this profile"
        )
    return recorded


def check_current(conn: sqlean.Connection, path: Path) -> None:
    """``check_schema``, and refuse a file an older Navi wrote: its upgrade writes to it, which
    a file opened only to read cannot take."""
    recorded = check_schema(conn, path)
    known = [name for name, _ in MIGRATIONS]
    if any(name not in recorded and name not in READ_WITHOUT for name in known):
        raise ProfileError(
            f"{path} was written by an older version of Navi (memory schema"
            f" {schema_version(recorded)}; this version reads {schema_version(known)}), and its"
            " upgrade writes to it, which cannot be done now; it was left untouched: open it"
            " once where it can be written (its disk mounted read-write)"
        )


async def migrate(db: Database, steps: list[tuple[str, Step]] | None = None) -> list[str]:
    """Apply every step not yet recorded; return the names applied now. A file already up
    to date is only read."""
    steps = MIGRATIONS if steps is None else steps
    app_id = await db.scalar("PRAGMA application_id")
    if await db.scalar(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'"
    ):
        done = {r[0] for r in await db.fetchall("SELECT name FROM schema_migrations")}
        if app_id == APPLICATION_ID and all(name in done for name, _ in steps):
            return []
    async with db.transaction():
        await db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        await db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        done = {r[0] for r in await db.fetchall("SELECT name FROM schema_migrations")}
    applied = []
    for name, step in steps:
        if name in done:
            continue
        if name in NO_FOREIGN_KEYS:
            await db.execute("PRAGMA foreign_keys = OFF")
        try:
            async with db.transaction():
                await step(db)
                await db.execute(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                    (name, datetime.now(UTC).isoformat(timespec="seconds")),
                )
        finally:
            if name in NO_FOREIGN_KEYS:
                await db.execute("PRAGMA foreign_keys = ON")
        applied.append(name)
    return applied
