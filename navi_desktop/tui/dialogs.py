"""Small modal screens: confirm, ask for text, choose one of a few answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from navi_desktop.errors import NotFound
from navi_desktop.terminal_text import safe
from navi_desktop.tui.widgets.ordered import OrderedInput

T = TypeVar("T")


class Dialog(ModalScreen[str | None]):
    """A centred, bordered box over the dimmed app. Its CSS names this class: Textual scopes a
    class's DEFAULT_CSS to that class, so rules on ``ModalScreen`` would never match."""

    DEFAULT_CSS = """
    Dialog { align: center middle; }
    Dialog > Vertical { width: 72; max-width: 100%; height: auto; max-height: 100%;
                        border: thick $primary; background: $surface; padding: 1 2; }
    Dialog .title { text-style: bold; margin-bottom: 1; }
    Dialog .body-scroll { height: auto; max-height: 60vh; }
    Dialog .error { color: $error; height: auto; }
    Dialog Horizontal { height: auto; align: right middle; margin-top: 1; }
    Dialog Button { margin-left: 1; }
    """
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", show=False)]


class ChoiceScreen(Dialog):
    """A question with a few answers; Esc answers ``None``. The title and body are shown as
    written, never read as markup: they hold what the user wrote (a session's title, a path)."""

    def __init__(
        self, title: str, body: str, choices: list[tuple[str, str, str]], **kw: object
    ) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._title, self._body = title, body
        self._choices = choices  # (answer, label, button variant)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self._title, classes="title", markup=False)
            # Scrolls when long (Shift+Tab reaches it): the buttons always stay on screen.
            with VerticalScroll(classes="body-scroll"):
                yield Static(self._body, classes="body", markup=False)
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
    """Cancel (focused: the safe answer) or ``yes``; ``middle`` answers go between them (a
    narrower way to do it, such as forgetting a memory but not every mention of it)."""

    def __init__(
        self,
        title: str,
        body: str,
        yes: str = "Yes",
        danger: bool = True,
        middle: list[tuple[str, str, str]] | None = None,
    ) -> None:
        super().__init__(
            title,
            body,
            [
                ("no", "Cancel", "default"),
                *(middle or []),
                ("yes", yes, "error" if danger else "primary"),
            ],
        )


def confirmed(answer: str | None) -> bool:
    return answer == "yes"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def forget_body(label: str, preview: dict) -> str:
    """The forget dialog's text from the daemon's preview (memory.forget_preview)."""
    lines = [label]
    if preview.get("versions"):
        lines.append("With its earlier versions " + ", ".join(f"#{v}" for v in preview["versions"]))
    lines.append("")
    everywhere, evidence = preview["everywhere"], preview["evidence"]
    if everywhere:
        lines.append("Everywhere, it also goes from: " + "; ".join(everywhere) + ".")
        lines += [f"  {_clip(sample, 90)}" for sample in preview.get("samples", [])[:3]]
        if evidence != everywhere:
            only = "; ".join(evidence) if evidence else "nothing else"
            lines.append(f"Only it and its evidence: {only}.")
    else:
        lines.append("It occurs nowhere else.")
    if preview.get("broad") and everywhere:
        lines.append(f"Careful: {preview['broad']}; unrelated text with that word goes too.")
    if preview.get("kept"):
        # one line (a title may hold line breaks); long enough for three sessions' commands
        lines.append(_clip(preview["kept"], 600))
    lines.append(f"Matched as {preview['rule']}.")
    lines.append("It will not be learned again.")
    return "\n".join(lines)


class TextScreen(Dialog):
    """Ask for one line of text; ``check`` returns an error message to show inline, or None."""

    def __init__(
        self,
        title: str,
        value: str = "",
        *,
        placeholder: str = "",
        check: Callable[[str], str | None] | None = None,
        error: str = "",
    ) -> None:
        super().__init__()
        self._title, self._value, self._placeholder = title, value, placeholder
        self._check, self._error = check, error

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self._title, classes="title")
            yield OrderedInput(self._value, placeholder=self._placeholder, id="text")
            yield Static(escape(safe(self._error)), classes="error", id="error")
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Save", id="save", variant="primary")

    @on(Input.Submitted)
    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        text = self.query_one("#text", Input).value.strip()
        try:
            problem = "cannot be empty" if not text else (self._check and self._check(text))
        except Exception as err:  # a check that cannot decide refuses; it never closes the app
            problem = str(err) or type(err).__name__
        if problem:
            self.query_one("#error", Static).update(escape(safe(problem)))
            return
        self.dismiss(text)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)


async def ask_text(
    app: Any,
    title: str,
    value: str = "",
    save: Callable[[str], Awaitable[T | None]] | None = None,
    **kw: Any,
) -> T | None:
    """Ask for text and ``save`` it; None when the user cancels (or ``save`` returns None).

    A save that fails asks again with the words as typed and the reason under them, so what
    was typed is never lost to a refusal (too long, a folder that cannot be written...).
    ``NotFound`` is raised to the caller: the thing saved to no longer exists.
    Run from a worker: ``save`` may ask more (a confirm) itself.
    """
    error = ""
    while True:
        text = await app.push_screen_wait(TextScreen(title, value, error=error, **kw))
        if text is None or save is None:
            return text
        try:
            return await save(text)
        except NotFound:  # what it saves to is gone (deleted meanwhile): asking cannot help
            raise
        except Exception as err:
            value, error = text, str(err) or type(err).__name__
