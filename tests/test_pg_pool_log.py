"""The driver's pool, remaking a connection in the background while the server is in
recovery, logs one line in the daemon's log, not a traceback."""

from __future__ import annotations

import logging

import navi_desktop.memory.pg.db  # noqa: F401  (installs the filter)


def test_a_pool_failure_in_the_background_is_one_line(caplog):
    pool_log = logging.getLogger("asyncpg.pool")
    caplog.set_level(logging.WARNING, logger="asyncpg.pool")
    try:
        raise ConnectionError("the database system is in recovery mode\nDETAIL: more")
    except ConnectionError:
        pool_log.warning("Failed to restore the pool connection floor; retrying", exc_info=True)
    (record,) = caplog.records
    text = caplog.handler.format(record)
    assert "Traceback" not in text and "\n" not in text
    assert "ConnectionError: the database system is in recovery mode" in text
