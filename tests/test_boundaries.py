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


def test_the_app_imports_no_ollama_and_no_engine():
    """The TUI is a client of the daemon: loading every screen pulls in neither the Ollama
    client nor the database layer."""
    modules = imported_after(
        "import navi_desktop.tui.app, navi_desktop.tui.chat.screen,"
        " navi_desktop.tui.inspector.screen, navi_desktop.tui.settings.screen"
    )
    assert "textual" in modules
    assert not {"ollama", "httpx", "aiosqlite", "sqlite_vec", "numpy", "pydantic"} & modules


def test_what_a_client_loads_to_reach_the_daemon_leaves_the_engine_out():
    """Every `navi` command through the daemon, and the app's link (at run time, on its event
    loop), load the module that starts and finds the daemon, and the chat command: the
    engine (numpy, SQLite) cost them 0.1-0.3 s when one light helper came from it."""
    modules = imported_after(
        "import navi_desktop.daemon.main, navi_desktop.daemon.client, navi_desktop.cli.chat,"
        " navi_desktop.cli.daemon_cmds, navi_desktop.tui.link, navi_desktop.disk,"
        " navi_desktop.config_save"
    )
    assert not {"numpy", "aiosqlite", "sqlean", "sqlite3", "sqlite_vec"} & modules


def test_clients_import_no_pydantic():
    """The daemon's parameter models (pydantic) cost start-up time: every module a CLI command
    or the TUI loads to reach the daemon leaves pydantic out."""
    modules = imported_after(
        "import navi_desktop.cli.main, navi_desktop.cli.memory, navi_desktop.cli.daemon_cmds,"
        " navi_desktop.cli.chat,"
        " navi_desktop.daemon.client, navi_desktop.daemon.main, navi_desktop.daemon.memory_api,"
        " navi_desktop.tui.link"
    )
    assert not {"pydantic", "pydantic_core"} & modules


def test_only_the_daemon_side_imports_pydantic():
    import pathlib

    root = pathlib.Path(__file__).parent.parent / "navi_desktop"
    client_side = {"client.py", "wire.py", "main.py", "memory_api.py"}
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if (
            path.relative_to(root).parts[0] not in ("daemon", "llm")
            or (path.parent.name == "daemon" and path.name in client_side)
        )
        and any(
            line.lstrip().startswith(("import pydantic", "from pydantic"))
            for line in path.read_text().splitlines()
        )
    ]
    assert offenders == []


def test_only_the_tui_imports_textual():
    import pathlib

    root = pathlib.Path(__file__).parent.parent / "navi_desktop"
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "tui" not in path.relative_to(root).parts
        and any(
            line.lstrip().startswith(("import textual", "from textual"))
            for line in path.read_text().splitlines()
        )
    ]
    assert offenders == []
