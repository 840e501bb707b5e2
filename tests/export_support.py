"""Fixtures of the tests of ``navi memory export -o FILE``: a profile of two memories, one a
secret, for ``navi`` without a daemon, and the folder the exports go to. A test module uses
them by importing them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.daemon_home import offline_profile

SECRET = "zorbquux"


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """The environment of a ``navi`` with no daemon, whose profile holds "likes tea" and the
    vault code ``SECRET``."""
    return offline_profile(tmp_path / "home", "likes tea", f"the vault code is {SECRET}")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Where the exports go."""
    (tmp_path / "out").mkdir()
    return tmp_path / "out"
