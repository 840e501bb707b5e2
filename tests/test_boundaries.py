"""Layer boundaries: the engine imports neither Textual nor the Ollama client."""

from __future__ import annotations

import subprocess
import sys


def imported_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return {name.split(".")[0] for name in out.split()}


def test_engine_imports_no_ui_and_no_ollama():
    modules = imported_after("import navi_desktop.memory, navi_desktop.memory.embedders")
    assert "textual" not in modules
    assert "ollama" not in modules
    assert "httpx" not in modules


def test_cli_entry_is_light():
    modules = imported_after("import navi_desktop.cli")
    assert not {"textual", "ollama", "numpy", "aiosqlite"} & modules
