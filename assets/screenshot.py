"""Make the README's screenshots with the app itself (``App.save_screenshot``).

    python assets/screenshot.py

Runs a real daemon in a throw-away NAVI_HOME against the fake Ollama of the tests, adds a
few memories, has one exchange, and saves ``assets/navi-chat.svg`` and
``assets/navi-memory.svg``. Each is also checked as a PNG with ``rsvg-convert`` when it is
installed (Debian: ``librsvg2-bin``), into a temporary folder.

Textual writes the spaces of a screenshot as no-break spaces, which some SVG renderers
draw with no width ("Lisbon and" became "Lisbonand"): they are written as plain spaces that
the SVG keeps (``xml:space="preserve"`` and ``white-space: pre``).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
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


PROFILE = "alex"


def portable(svg: str) -> str:
    """The SVG with plain spaces that every renderer keeps."""
    svg = svg.replace("&#160;", " ").replace("<svg ", '<svg xml:space="preserve" ', 1)
    return svg.replace("<style>", "<style>\n    text { white-space: pre; }", 1)


def save(app: NaviApp, name: str) -> None:
    path = ROOT / "assets" / name
    with tempfile.TemporaryDirectory() as tmp:
        app.save_screenshot(name, path=tmp)
        path.write_text(portable((Path(tmp) / name).read_text()))
        if shutil.which("rsvg-convert"):  # it must render as a picture, not only in a browser
            png = Path(tmp) / "check.png"
            subprocess.run(["rsvg-convert", str(path), "-o", str(png)], check=True)
            print(f"{path}: renders as a {png.stat().st_size // 1024} KiB PNG")


async def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="navi-shot-"))
    try:
        async with FakeOllama(MODELS, port=11434) as fake:
            paths = make_home(home, "http://127.0.0.1:11434")
            config = paths.config_file.read_text().replace('"tester"', f'"{PROFILE}"')
            paths.config_file.write_text(config)
            daemon = await Daemon(paths).start()
            for value, fields in FACTS:
                await daemon.call(
                    "memory.add", {"args": [value], "kwargs": fields, "profile": PROFILE}
                )
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
                    save(app, "navi-chat.svg")
                    await pilot.press("f3")
                    await until(pilot, lambda: getattr(app.screen, "history_of", None) is not None)
                    await pilot.pause(0.5)
                    save(app, "navi-memory.svg")
            finally:
                await daemon.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
