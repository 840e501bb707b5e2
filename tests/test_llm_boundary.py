"""Only navi_desktop/llm/backend.py may import the ``ollama`` client."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import navi_desktop

PACKAGE = Path(navi_desktop.__file__).parent
IMPORTS_OLLAMA = re.compile(
    r"^\s*(?:import\s+ollama\b|from\s+ollama(?:\.\w+)*\s+import\b)"
    r"|import_module\(\s*[\"']ollama|__import__\(\s*[\"']ollama",
    re.M,
)


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return {name.split(".")[0] for name in result.stdout.split()}


def test_only_the_backend_imports_ollama():
    light = [
        "navi_desktop",
        "navi_desktop.errors",
        "navi_desktop.llm",
        "navi_desktop.llm.errors",
        "navi_desktop.llm.types",
        "navi_desktop.llm.schema",
        "navi_desktop.memory",
        "navi_desktop.cli",
    ]
    modules = loaded_after("; ".join(f"import {name}" for name in light))
    assert not {"ollama", "httpx", "pydantic"} & modules
    assert "ollama" in loaded_after("from navi_desktop.llm import OllamaBackend")

    importers = sorted(
        path.relative_to(PACKAGE.parent).as_posix()
        for path in PACKAGE.rglob("*.py")
        if IMPORTS_OLLAMA.search(path.read_text(encoding="utf-8"))
    )
    assert importers == ["navi_desktop/llm/backend.py"]
