"""An import the daemon died in the middle of: the command said only "the daemon closed the
connection", leaving the user to wonder what was saved. It says that an import is saved
whole or not at all, and that running it again skips what is there; and nothing is saved."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from tests.daemon_home import navi_home, write_export


def test_an_import_cut_short_by_the_daemons_death_says_what_became_of_it(tmp_path: Path) -> None:
    export = write_export(tmp_path / "big.json", 40_000)
    with navi_home() as h:
        pid = h.start()
        importing = h.popen("memory", "import", str(export))
        time.sleep(3)  # well into it (40,000 memories take ~15 s here)
        assert importing.poll() is None, importing.communicate()
        os.kill(pid, signal.SIGKILL)
        out, err = importing.communicate(timeout=60)
        assert importing.returncode == 1, (out, err)
        assert err.strip() == (
            "navi: the daemon closed the connection during the import: an import is saved"
            " whole or not at all, so run it again (what it already saved is skipped)"
        )
        listed = h.navi("memory", "list", "--json")
        assert json.loads(listed.stdout)["total"] == 0  # whole or not at all: not at all
