"""The ``navi`` command."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from navi_desktop.cli.main import run

    return run(sys.argv[1:] if argv is None else argv)
