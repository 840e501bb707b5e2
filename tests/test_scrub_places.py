"""Every text column of the schema, on both backends, is either one a forget reaches
(scrub_plan.TEXT_COLUMNS) or named here with why it never holds the user's words: a new
column that could hold them fails this test until the forget reaches it."""

from __future__ import annotations

from navi_desktop.memory.models import Memory
from navi_desktop.memory.scrub_plan import TEXT_COLUMNS

# (table, column): why no user's words are in it.
NOT_WORDS = {
    ("embeddings", "model"): "the embedder's name",
    ("embeddings", "content_hash"): "a hash",
    ("entities", "type"): "one of five kinds",
    ("entities_enriched", "model"): "the model's name",
    ("forgotten_phrases", "hash"): "a keyed hash",
    ("injections", "session_id"): "an id",
    ("injections", "signals"): "scores and a fixed reason",
    ("memories", "kind"): "one of four kinds",
    ("memories", "category"): "one of the fixed categories",
    ("memories", "norm_key"): "rebuilt from subject and key when they are redacted",
    ("memories", "source"): "one of the fixed sources",
    ("memories", "session_id"): "an id",
    ("memories", "status"): "one of the fixed states",
    ("memory_history", "action"): "a fixed word",
    ("memory_history", "actor"): "a fixed word",
    ("messages", "session_id"): "an id",
    ("messages", "role"): "one of four roles",
    ("messages", "name"): "the tool's name as the model called it",
    ("meta", "key"): "Navi's own keys",
    ("reply_feedback", "session_id"): "an id",
    ("schema_migrations", "name"): "a step's name",
    ("sessions", "id"): "an id",
    ("sessions", "state"): "one of three states",
    ("tombstones", "fact_hash"): "a keyed hash",
    ("tombstones", "value_hash"): "a keyed hash",
    ("tombstones", "kind"): "one of four kinds",
    ("users", "profile"): "the profile's name, on a memory server",
}


def _unaccounted(columns: set[tuple[str, str]]) -> set[tuple[str, str]]:
    times = {c for c in columns if c[1] in ("at", "applied_at") or c[1].endswith("_at")}
    times |= {c for c in columns if c[1] in ("valid_from", "valid_to")}
    scrubbed = {(table, column) for table, column, _ in TEXT_COLUMNS}
    return columns - times - scrubbed - set(NOT_WORDS)


async def _text_columns(store) -> set[tuple[str, str]]:
    from navi_desktop.memory.pg import PgMemoryStore

    if isinstance(store, PgMemoryStore):
        from navi_desktop.memory.pg.db import SCHEMA

        async with store.db.reading():
            rows = await store.db.fetchall(
                "SELECT table_name, column_name FROM information_schema.columns"
                " WHERE table_schema = $1 AND data_type = 'text'",
                (SCHEMA,),
            )
        return {(r["table_name"], r["column_name"]) for r in rows}
    tables = await store.db.fetchall(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
        " AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '%_fts_%'"
    )
    found = set()
    for (table,) in tables:
        for row in await store.db.fetchall(f"SELECT name, type FROM pragma_table_info('{table}')"):
            if row[1].upper() == "TEXT":
                found.add((table, row[0]))
    return found


async def test_every_text_column_is_scrubbed_or_said_to_hold_no_words(any_store):
    columns = await _text_columns(any_store)
    assert columns, "no text column found: the query does not read this schema"
    assert _unaccounted(columns) == set()
    scrubbed = {(table, column) for table, column, _ in TEXT_COLUMNS}
    assert scrubbed <= columns, "a place the forget reaches is not in the schema"


async def test_a_forget_reaches_the_reason_a_memory_waits_for_review(any_store):
    kept = await any_store.add_memory(
        "likes tea",
        status="held",
        review_reason="said just after: my dentist is Quillfeather",
    )
    gone = await any_store.add_memory("my dentist is Quillfeather")
    await any_store.forget(gone.memory.id)
    after: Memory = await any_store.get(kept.memory.id)
    assert "quillfeather" not in (after.review_reason or "").lower()
    assert after.value == "likes tea"
