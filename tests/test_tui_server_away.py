"""The app on a profile kept on a memory server that does not answer: the banner names the
server and the fix in plain text (a message's "[memory] dsn" is not markup), and typing goes
on, kept on this machine until the server is back."""

from __future__ import annotations

import re

from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.chat.messages import MessageView
from tests.tui_support import SIZE, Daemon, banner, make_home, until

AWAY = "postgresql://navi:pw@127.0.0.1:9/navi"  # the discard port: nothing answers


async def test_a_server_away_is_named_and_typing_goes_on(fake, tmp_path):
    paths = make_home(tmp_path, fake.url)
    config = paths.config_file
    config.write_text(
        config.read_text().replace(
            "[memory]\n", f'[memory]\nbackend = "postgres"\ndsn = "{AWAY}"\n'
        )
    )
    d = await Daemon(paths).start()
    try:
        app = NaviApp(paths, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press(*"my locker code is 4711", "enter")
            views = lambda: list(app.screen.query(MessageView))  # noqa: E731
            await until(pilot, lambda: len(views()) == 2 and app.screen.reply is None)
            # The count of what is kept comes with the next status (a slow machine's banner
            # first names the server alone).
            kept = re.compile(r"\d+ messages? kept on this machine")
            await until(pilot, lambda: kept.search(banner(app)))
            text = banner(app)
            assert "[memory] dsn" in text and "navi-desktop[pgserver]" in text
            assert "pw" not in text.replace("***", "")  # no password shown
        outbox = next(paths.data.rglob("outbox.db"))
        assert b"my locker code is 4711" in outbox.read_bytes()
    finally:
        await d.stop()
