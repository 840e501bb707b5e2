"""Make the README's screenshots with the app itself (``App.save_screenshot``).

    python assets/screenshot.py

Runs a real daemon in a throw-away NAVI_HOME against the fake Ollama of the tests, adds a
few memories, has one exchange, and saves ``assets/navi-chat.svg`` and
``assets/navi-memory.svg``.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from navi_desktop.tui.app import NaviApp  # noqa: E402
from tests.fake_ollama import FakeOllama, Reply  # noqa: E402
from tests.pipeline_helpers import MODELS  # noqa: E402
from tests.tui_support import Daemon, make_home, until  # noqa: E402

FACTS = [
    ("Lisbon", {"category": "profile", "key": "home city", "evidence": "I moved to Lisbon"}),
    ("green tea, no sugar", {"category": "preferences", "key": "drink"}),
    ("Rust and Python", {"category": "technical", "key": "languages"}),
    ("a bike trip to Porto in May", {"category": "projects", "key": "next trip"}),
]
REPLY = (
    "Since you live in **Lisbon** and like to travel by bike, here is a plan for Porto:\n\n"
    "1. Take the coast road north through Peniche and Figueira da Foz.\n"
    "2. Stop in Aveiro for the canals.\n"
    "3. Arrive in Porto on day four.\n\n"
    "Pack light: ```panniers, spare tube, rain jacket```."
)


async def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="navi-shot-"))
    try:
        async with FakeOllama(MODELS, port=11434) as fake:
            daemon = await Daemon(make_home(home, "http://127.0.0.1:11434")).start()
            for value, fields in FACTS:
                await daemon.call("memory.add", {"args": [value], "kwargs": fields})
            fake.script(Reply(REPLY))
            app = NaviApp(daemon.paths, autostart=False)
            try:
                async with app.run_test(size=(120, 36)) as pilot:
                    await until(pilot, lambda: app.status.memories is not None)
                    await pilot.press(*"plan my bike trip to Porto", "enter")
                    await until(pilot, lambda: len(app.screen.query("MessageView")) == 2)
                    await until(pilot, lambda: app.screen.reply is None)
                    await pilot.pause(0.3)
                    for widget in app.screen.query("TextArea, Input"):
                        widget.cursor_blink = False
                    app.save_screenshot("navi-chat.svg", path=str(ROOT / "assets"))
                    await pilot.press("f3")
                    await pilot.pause(1.0)
                    app.save_screenshot("navi-memory.svg", path=str(ROOT / "assets"))
            finally:
                await daemon.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
