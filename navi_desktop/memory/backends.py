"""Which storage a profile lives in: its SQLite file (the default) or a memory server
(``[memory] backend = "postgres"``). Both stores have the same engine API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from navi_desktop.errors import StorageUnavailable

if TYPE_CHECKING:
    from navi_desktop.config import MemorySettings
    from navi_desktop.memory.embedders import Embedder
    from navi_desktop.memory.pg.store import PgMemoryStore
    from navi_desktop.memory.store import MemoryStore
    from navi_desktop.paths import Paths

    # What code both backends run is written for: the engine API, and a database that takes
    # SQLite's placeholders (the server's numbers them for PostgreSQL).
    Store = MemoryStore | PgMemoryStore

NEEDS_EXTRA = (
    "[memory] backend = 'postgres' needs the PostgreSQL client:"
    " python -m pip install 'navi-desktop[postgres]' (or set backend = 'sqlite')"
)


def on_server(memory: MemorySettings) -> bool:
    return memory.backend == "postgres"


def server_dsn(memory: MemorySettings) -> str:
    dsn = memory.effective_dsn()
    if not dsn:
        from navi_desktop.memory.pg.connect import START_HINT

        raise StorageUnavailable(
            "[memory] backend = 'postgres' but no memory server is named: set [memory] dsn or"
            f" NAVI_PG_DSN to postgresql://user@host/navi; to run one here, {START_HINT}"
        )
    return dsn


async def open_server_store(
    memory: MemorySettings, profile: str, *, embedder: Embedder | None, create: bool = True
) -> Any:
    """The profile's store on the memory server (a ``PgMemoryStore``)."""
    dsn = server_dsn(memory)
    try:
        from navi_desktop.memory.pg import PgMemoryStore
    except ImportError as exc:  # asyncpg or pgvector missing
        raise StorageUnavailable(NEEDS_EXTRA) from exc
    try:
        import asyncpg  # noqa: F401
        import pgvector  # noqa: F401
    except ImportError as exc:
        raise StorageUnavailable(NEEDS_EXTRA) from exc
    return await PgMemoryStore.open(dsn, profile, embedder=embedder, create=create)


async def open_store(
    memory: MemorySettings,
    paths: Paths,
    profile: str,
    *,
    embedder: Embedder | None,
    create: bool = True,
) -> Any:
    """The profile's store where the settings keep it."""
    if on_server(memory):
        return await open_server_store(memory, profile, embedder=embedder, create=create)
    from navi_desktop.memory.store import MemoryStore

    return await MemoryStore.open(paths.profile_db(profile), embedder=embedder, create=create)
