""" "What did you use?": the memories put into one turn's prompt, why each was chosen, and
forget or pin right there."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from navi_desktop.daemon.client import RemoteNotFound
from navi_desktop.tui.dialogs import ConfirmScreen, confirmed, forget_body
from navi_desktop.tui.widgets.footer import Footer

REASONS = {
    "relevant": "matched this message",
    "rule": "a standing rule",
    "profile": "your profile summary",
    "summary": "an earlier session's summary",
}
SIGNALS = {"bm25": "words", "vector": "meaning", "entity": "names"}


def memory_line(memory: dict[str, Any]) -> str:
    key = memory.get("key")
    head = f"{memory.get('category') or memory.get('kind')}"
    body = f"{key}: {memory['value']}" if key else memory["value"]
    pin = " 📌" if memory.get("pinned") else ""
    return f"[{head}] {body}{pin}"


def why(injection: dict[str, Any]) -> str:
    reason = REASONS.get(injection.get("reason", ""), injection.get("reason", ""))
    signals = injection.get("signals") or {}
    ranks = ", ".join(
        f"{SIGNALS.get(name, name)} #{s['rank']}" for name, s in signals.items() if s.get("rank")
    )
    return f"{reason}" + (f" — {ranks}" if ranks else "") + f" · score {injection['score']:.3f}"


class UsedScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    UsedScreen { align: center middle; }
    UsedScreen > Vertical { width: 90%; height: 80%; border: thick $primary; background: $surface;
                            padding: 0 1; }
    UsedScreen .title { text-style: bold; padding: 1 0; }
    UsedScreen OptionList { height: 1fr; }
    """
    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="navi.used.close"),
        Binding("f", "forget", "Forget", id="navi.used.forget"),
        Binding("p", "pin", "Pin / unpin", id="navi.used.pin"),
    ]

    def __init__(self, user_message_id: int) -> None:
        super().__init__()
        self.user_message_id = user_message_id
        self.injections: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("What did you use? The memories in this turn's prompt", classes="title")
            yield Static("Loading…", id="used-empty")
            yield OptionList(id="used-list")
            yield Footer()

    def on_mount(self) -> None:
        self.load()

    @work(exclusive=True, group="used", exit_on_error=False)
    async def load(self) -> None:
        try:
            self.injections = await self.app.link.memory("used", self.user_message_id)  # type: ignore[attr-defined]
        except Exception as err:
            self.app.report(err, "Reading what this reply used")  # type: ignore[attr-defined]
            self.injections = []
        options = self.query_one(OptionList)
        options.clear_options()
        for inj in self.injections:
            memory = inj.get("memory") or {"value": f"memory {inj['memory_id']}"}
            text = f"{memory_line(memory)}\n  {why(inj)}"
            options.add_option(Option(text, id=str(inj["memory_id"])))
        empty = self.query_one("#used-empty", Static)
        empty.update("No memories were put into this turn." if not self.injections else "")
        empty.display = not self.injections
        if self.injections:
            options.highlighted = 0
            options.focus()

    def _selected(self) -> dict[str, Any] | None:
        index = self.query_one(OptionList).highlighted
        return self.injections[index] if index is not None and self.injections else None

    def _gone(self, line: str) -> None:
        """The memory was forgotten elsewhere while this list was open: said as such (never
        "no memory with id N"), and the list follows."""
        self.notify(line)
        self.load()

    @work(exclusive=True, group="used-action", exit_on_error=False)
    async def action_forget(self) -> None:
        inj = self._selected()
        if inj is None:
            return
        memory = inj.get("memory") or {}
        link = self.app.link  # type: ignore[attr-defined]
        try:  # where else it occurs, shown before anything goes
            preview = await link.memory("forget_preview", inj["memory_id"])
        except RemoteNotFound:
            self._gone("Already forgotten (from elsewhere, meanwhile)")
            return
        except Exception as err:
            self.app.report(err, "Looking up where it occurs")  # type: ignore[attr-defined]
            return
        narrower = preview["evidence"] != preview["everywhere"]
        answer = await self.app.push_screen_wait(
            ConfirmScreen(
                "Forget this memory?",
                forget_body(memory_line(memory), preview),
                yes="Forget everywhere" if narrower else "Forget",
                middle=[("evidence", "Only it and its evidence", "warning")] if narrower else None,
            )
        )
        if not confirmed(answer) and answer != "evidence":
            return
        scope = "evidence" if answer == "evidence" else "everywhere"
        try:
            await link.memory("forget", inj["memory_id"], scope=scope)
        except RemoteNotFound:
            self._gone("Already forgotten (from elsewhere, meanwhile)")
            return
        except Exception as err:
            self.app.report(err, "Forgetting")  # type: ignore[attr-defined]
            return
        self.notify("Forgotten")
        self.load()

    @work(exclusive=True, group="used-action", exit_on_error=False)
    async def action_pin(self) -> None:
        inj = self._selected()
        if inj is None:
            return
        pinned = not (inj.get("memory") or {}).get("pinned")
        try:
            await self.app.link.memory("pin", inj["memory_id"], pinned)  # type: ignore[attr-defined]
        except RemoteNotFound:
            self._gone(f"Not {'pinned' if pinned else 'unpinned'}: it was forgotten meanwhile")
            return
        except Exception as err:
            self.app.report(err, "Pinning")  # type: ignore[attr-defined]
            return
        self.notify("Pinned" if pinned else "Unpinned")
        self.load()
