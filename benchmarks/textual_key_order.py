"""A minimal reproduction, in bare Textual (no Navi code), of keys applied out of order.

    python benchmarks/textual_key_order.py [RUNS]

A TextArea holds "teacup"; one burst arrives as a fast typist's keys do, in one read from the
terminal: six Backspaces, then "Bruno". The expected text is "Bruno". Textual inserts a
printable key in the focused widget's own ``_on_key``, but runs a key *binding* (Backspace is
TextArea's ``delete_left`` binding) only after the key event has bubbled up to the app: the
letters typed after the Backspaces are inserted first, and the Backspaces then delete them.
The result is "teacu" ("teacupBruno" less six characters). Keys typed one at a time, or a
pause between the Backspaces and the letters, give "Bruno".

Known upstream as Textualize/textual#6605 (a fix is proposed in #6631); Navi's text fields
work around it (navi_desktop/tui/widgets/ordered.py).

Two ways are run: the app in a real pseudo-terminal fed the burst as bytes (what a person's
terminal sends), and the same key events posted at once in-process (what Textual's input
thread does with one read). Both print how many runs ended with the right text.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import select
import struct
import sys
import tempfile
import termios
import time
from typing import ClassVar

from textual import events
from textual.app import App, ComposeResult
from textual.widgets import TextArea

TYPED = "teacup"
BURST = "\x7f" * 6 + "Bruno"
EXPECTED = "Bruno"


class Bare(App[None]):
    BINDINGS: ClassVar = [("ctrl+s", "dump", "Write the text to a file and quit")]

    def __init__(self, out: str | None = None) -> None:
        super().__init__()
        self.out = out

    def compose(self) -> ComposeResult:
        yield TextArea()

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def action_dump(self) -> None:
        if self.out:
            with open(self.out, "w") as handle:
                handle.write(self.query_one(TextArea).text)
        self.exit()


def in_a_terminal() -> str | None:
    """One run in a pseudo-terminal; returns the TextArea's text."""
    out = tempfile.mktemp()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the bare app on the pty
        os.environ["TERM"] = "xterm-256color"
        Bare(out).run()
        os._exit(0)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))

    def drain(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if select.select([fd], [], [], 0.05)[0]:
                try:
                    os.read(fd, 65536)
                except OSError:
                    return

    drain(1.5)
    os.write(fd, TYPED.encode())
    drain(0.3)
    os.write(fd, BURST.encode())  # one write: one read on the other side
    drain(0.5)
    os.write(fd, b"\x13")  # Ctrl+S
    drain(1.0)
    os.waitpid(pid, 0)
    try:
        with open(out) as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    finally:
        if os.path.exists(out):
            os.unlink(out)


async def in_process() -> str:
    """The same keys posted at once, as the input thread posts the events of one read."""
    app = Bare()
    async with app.run_test() as pilot:
        await pilot.press(*TYPED)
        for char in BURST:
            key = "backspace" if char == "\x7f" else char
            app.post_message(events.Key(key, char))
        await pilot.pause(0.3)
        return app.query_one(TextArea).text


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    seen: dict[str | None, int] = {}
    for _ in range(runs):
        got = in_a_terminal()
        seen[got] = seen.get(got, 0) + 1
    print(f"pseudo-terminal: {seen.get(EXPECTED, 0)}/{runs} right; results {seen}")
    seen = {}
    for _ in range(runs):
        got = asyncio.run(in_process())
        seen[got] = seen.get(got, 0) + 1
    print(f"in-process:      {seen.get(EXPECTED, 0)}/{runs} right; results {seen}")


if __name__ == "__main__":
    main()
