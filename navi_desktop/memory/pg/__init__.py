"""The PostgreSQL backend: one profile's memory on a server shared by a person's machines
or a household. Needs the ``postgres`` extra (asyncpg, pgvector)."""

from navi_desktop.memory.pg.connect import StorageUnavailable, shown
from navi_desktop.memory.pg.store import PgMemoryStore

__all__ = ["PgMemoryStore", "StorageUnavailable", "shown"]
