"""Small modal screens: confirm, ask for text, choose one of a few answers."""

from __future__ import annotations

from collections.abc import Callable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

DIALOG_CSS = """
ModalScreen { align: center middle; }
ModalScreen > Vertical { width: 72; max-width: 90%; height: auto; border: thick $primary;
                         background: $surface; padding: 1 2; }
ModalScreen .title { text-style: bold; margin-bottom: 1; }
ModalScreen .error { color: $error; height: auto; }
ModalScreen Horizontal { height: auto; align: right middle; margin-top: 1; }
ModalScreen Button { margin-left: 1; }
"""


class ChoiceScreen(ModalScreen[str | None]):
    """A question with a few answers; Esc answers ``None``."""

    DEFAULT_CSS = DIALOG_CSS
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", show=False)]

    def __init__(
        self, title: str, body: str, choices: list[tuple[str, str, str]], **kw: object
    ) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._title, self._body = title, body
        self._choices = choices  # (answer, label, button variant)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self._title, classes="title")
            yield Static(self._body)
            with Horizontal():
                for answer, label, variant in self._choices:
                    yield Button(label, id=f"choice-{answer}", variant=variant)  # type: ignore[arg-type]

    def on_mount(self) -> None:
        # The first answer is the safe one (Cancel, Stay): a stray Enter must not destroy.
        self.query(Button).first().focus()

    @on(Button.Pressed)
    def _chosen(self, event: Button.Pressed) -> None:
        assert event.button.id is not None
        self.dismiss(event.button.id.removeprefix("choice-"))


class ConfirmScreen(ChoiceScreen):
    def __init__(self, title: str, body: str, yes: str = "Yes", danger: bool = True) -> None:
        super().__init__(
            title,
            body,
            [("no", "Cancel", "default"), ("yes", yes, "error" if danger else "primary")],
        )


def confirmed(answer: str | None) -> bool:
    return answer == "yes"


class TextScreen(ModalScreen[str | None]):
    """Ask for one line of text; ``check`` returns an error message to show inline, or None."""

    DEFAULT_CSS = DIALOG_CSS
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", show=False)]

    def __init__(
        self,
        title: str,
        value: str = "",
        *,
        placeholder: str = "",
        check: Callable[[str], str | None] | None = None,
    ) -> None:
        super().__init__()
        self._title, self._value, self._placeholder = title, value, placeholder
        self._check = check

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self._title, classes="title")
            yield Input(self._value, placeholder=self._placeholder, id="text")
            yield Static("", classes="error", id="error")
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Save", id="save", variant="primary")

    @on(Input.Submitted)
    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        text = self.query_one("#text", Input).value.strip()
        problem = "cannot be empty" if not text else (self._check(text) if self._check else None)
        if problem:
            self.query_one("#error", Static).update(problem)
            return
        self.dismiss(text)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)
