"""The model fields: a Select of the models installed in Ollama, and under it a note that says
when the chosen model is not installed, with a Pull button and the pull's progress bar."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Button, ProgressBar, Select, Static

from navi_desktop.tui.status import same_model

Model = dict[str, Any]  # one entry of ``ollama.models``: name, size, family, capabilities
# What a field's model must be able to do, by the Select's id.
NEEDS = {"f-ollama-chat-model": "completion", "f-ollama-embedding-model": "embedding"}


def can(model: Model, need: str | None) -> bool:
    """Whether ``model`` does ``need``; a server that names no capabilities is trusted."""
    capabilities = model.get("capabilities")
    return need is None or capabilities is None or need in capabilities


def describe(model: Model, room: int = 40) -> str:
    """What tells models apart in a picker: "llama3.2 · llama 3.2B · 2.0 GB" (without the
    family when that does not fit in ``room``)."""
    size = model.get("size")
    gigabytes = f"{size / 1e9:.1f} GB" if isinstance(size, int) and size > 0 else ""
    text = ""
    for details in (
        [model.get("family"), model.get("parameter_size")],
        [model.get("parameter_size")],
    ):
        parts = [str(model.get("name")), " ".join(str(d) for d in details if d), gigabytes]
        text = " · ".join(p for p in parts if p)
        if len(text) <= room:
            break
    return text


def model_options(
    installed: list[Model] | None, current: str, need: str | None = None
) -> list[tuple[Text, str]]:
    """(label, value) pairs: the installed models that can do ``need`` (an embedding-only
    model cannot chat: it would fail only when a message is sent), with ``current`` among them
    always, so a model that is not installed (or a list Ollama could not give) still shows
    what is set."""
    if installed is None:
        return [(current, current)]
    options: list[tuple[str, str]] = []
    found = False
    for model in installed:
        name = str(model.get("name"))
        if current and same_model(name, current):
            label = describe({**model, "name": current})
            if not can(model, need):
                label += f" (cannot do {need})"
            options.append((Text(label), current))  # the name as set: no change to save
            found = True
        elif can(model, need):
            options.append((Text(describe(model)), name))
    if current and not found:
        options.insert(0, (Text(f"{current} (not installed)"), current))
    return options


class ModelNote(Horizontal):
    """Watches one model Select (by id): what it lists, and what is wrong with its choice."""

    DEFAULT_CSS = """
    ModelNote { height: auto; display: none; }
    ModelNote.-shown { display: block; }
    ModelNote .model-note { width: 1fr; color: $warning; }
    ModelNote .model-note.-ok { color: $success; }
    ModelNote .model-note.-bad { color: $error; }
    ModelNote Button { margin: 0 1; min-width: 8; }
    ModelNote ProgressBar { margin: 0 1; display: none; }
    ModelNote ProgressBar.-shown { display: block; }
    """

    class PullRequested(Message):
        def __init__(self, note: ModelNote, model: str) -> None:
            super().__init__()
            self.note = note
            self.model = model

    def __init__(self, select_id: str) -> None:
        super().__init__(id=f"{select_id}-note")
        self.select_id = select_id
        self.installed: list[Model] | None = None  # None: not known (Ollama down or not asked)
        self.need = NEEDS.get(select_id)
        self.host = ""
        self.list_error: str | None = None
        self.pulling: str | None = None  # the model being pulled now
        self.pulled: str | None = None  # the model this note last pulled
        self._current = ""

    def compose(self) -> ComposeResult:
        yield Static("", classes="model-note", markup=False)  # model names are the server's
        yield Button("Pull", classes="pull", compact=True, variant="primary")
        yield ProgressBar(show_eta=False)

    @property
    def select(self) -> Select[str]:
        return self.screen.query_one(f"#{self.select_id}", Select)

    @property
    def value(self) -> str:
        value = self.select.value
        return value if isinstance(value, str) else ""

    def set_value(self, value: str) -> None:
        """Show ``value`` as the chosen model (it stays an option even when not installed)."""
        self._current = value
        self._fill(value)

    def set_models(self, installed: list[Model] | None, host: str, error: str | None) -> None:
        self.installed, self.host, self.list_error = installed, host, error
        self._fill(self.value or self._current)

    def _fill(self, value: str) -> None:
        select = self.select
        select.set_options(model_options(self.installed, value, self.need))
        if value:
            select.value = value
        self.update_note()

    def is_installed(self, name: str) -> bool | None:
        if self.installed is None:
            return None
        return any(same_model(str(m.get("name")), name) for m in self.installed)

    def update_note(self) -> None:
        """Say what is wrong with the chosen model, if anything, and offer the pull."""
        if self.pulling:
            return  # the pull's own progress shows here until it ends
        name, installed = self.value, self.is_installed(self.value)
        if not name:
            self._note("")
        elif installed is None:
            reason = f": {self.list_error}" if self.list_error else ""
            self._note(f"cannot list the installed models{reason}", bad=True)
        elif not installed:
            self._note(f"'{name}' is not installed on {self.host}", pull=True)
            self.query_one(ProgressBar).remove_class("-shown")
        elif self.pulled and same_model(self.pulled, name):
            self._note(f"pulled '{self.pulled}'", ok=True)
        else:
            self._note("")

    def _note(self, text: str, *, pull: bool = False, bad: bool = False, ok: bool = False) -> None:
        self.set_class(bool(text), "-shown")
        note = self.query_one(".model-note", Static)
        note.update(text)
        note.set_class(bad, "-bad")
        note.set_class(ok, "-ok")
        self.query_one(Button).display = pull

    # -- pulling -------------------------------------------------------------------------------

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if self.value and not self.pulling:
            self.post_message(self.PullRequested(self, self.value))

    def pull_started(self, model: str) -> None:
        self.pulling, self.pulled = model, None
        self._note(f"pulling '{model}'…")
        bar = self.query_one(ProgressBar)
        bar.update(total=None, progress=0)
        bar.add_class("-shown")

    def pull_progress(self, params: dict[str, Any]) -> None:
        total, completed = params.get("total"), params.get("completed")
        self._note(f"pulling '{self.pulling}': {params.get('status')}")
        if isinstance(total, int) and total > 0:
            progress = completed if isinstance(completed, int) else 0
            self.query_one(ProgressBar).update(total=total, progress=progress)

    def pull_ended(self, error: str | None) -> None:
        model, self.pulling = self.pulling, None
        bar = self.query_one(ProgressBar)
        if error is None:
            self.pulled = model
            if bar.total is not None:
                bar.update(progress=bar.total)  # late progress lines are dropped: show it done
            self._note(f"pulled '{model}'", ok=True)
        else:
            bar.remove_class("-shown")
            self._note(f"the pull of '{model}' failed: {error}", bad=True, pull=True)
