"""Switch the chat model from the chat (palette: "Switch chat model", Alt+O): a list of the
installed models that can chat, each with its family and size."""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from navi_desktop.tui.settings.models import can, describe
from navi_desktop.tui.status import same_model


class ModelPicker(ModalScreen[str | None]):
    DEFAULT_CSS = """
    ModelPicker { align: center middle; }
    ModelPicker > Vertical { width: 72; max-width: 100%; height: auto; max-height: 100%;
                             border: thick $primary; background: $surface; padding: 1 2; }
    ModelPicker .title { text-style: bold; margin-bottom: 1; }
    ModelPicker OptionList { height: auto; max-height: 16; }
    """
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", show=False)]

    def __init__(self, models: list[dict[str, Any]], current: str | None) -> None:
        super().__init__()
        self.models = [m for m in models if can(m, "completion")]
        self.current = current or ""

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Chat model (from the next message on)", classes="title")
            options = [
                Option(
                    describe(m) + ("  ✓" if same_model(m["name"], self.current) else ""), m["name"]
                )
                for m in self.models
            ]
            yield OptionList(*options) if options else Label("No installed model can chat.")

    def on_mount(self) -> None:
        for options in self.query(OptionList):
            names = [m["name"] for m in self.models]
            now = [i for i, n in enumerate(names) if same_model(n, self.current)]
            options.highlighted = now[0] if now else 0
            options.focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
