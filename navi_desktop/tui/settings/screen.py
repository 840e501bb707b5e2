"""The settings screen: every setting with its help, checked as it is typed, saved through the
daemon (which keeps the comments in config.toml), and updated live when the file changes.

The daemon owns the file: this screen reads with ``settings.get``, writes only the changed
keys with ``settings.set``, and follows ``settings.changed`` (sent for edits made in any
editor too), leaving alone the fields the user is editing.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Button, Input, Select, Static, Switch

from navi_desktop.config import capped
from navi_desktop.daemon.client import DaemonUnavailable
from navi_desktop.tui.base import NaviScreen
from navi_desktop.tui.link import LinkState
from navi_desktop.tui.settings.fields import FIELDS, MODEL
from navi_desktop.tui.settings.form import SettingsForm
from navi_desktop.tui.settings.models import ModelNote

HOST = FIELDS["ollama.host"]
EMBEDDING_HOST = FIELDS["ollama.embedding_host"]
EMBEDDING_MODEL = FIELDS["ollama.embedding_model"]
HOSTS = {HOST.key, EMBEDDING_HOST.key}
NEEDS_SETTINGS = {"save", "revert", "test_connection", "refresh_models"}


def flatten(settings: dict[str, Any]) -> dict[str, Any]:
    """``{"memory": {"budget_tokens": 800}}`` -> ``{"memory.budget_tokens": 800}``."""
    return {
        f"{section}.{name}": value
        for section, body in settings.items()
        if isinstance(body, dict)
        for name, value in body.items()
    }


class SettingsScreen(NaviScreen):
    SHOWS_CONFIG_ERRORS = True
    DEFAULT_CSS = """
    SettingsScreen #settings { height: 1fr; }
    SettingsScreen #config-errors { display: none; height: auto; padding: 0 1;
                                    color: $text; background: $warning 20%;
                                    border-left: thick $warning; }
    SettingsScreen #config-errors.-shown { display: block; }
    SettingsScreen #empty { display: none; color: $text-muted; padding: 1 2; }
    SettingsScreen.-empty #empty { display: block; }
    SettingsScreen.-empty SettingsForm { display: none; }
    SettingsScreen.-narrow FieldRow .line .help { display: none; }
    SettingsScreen.-narrow FieldRow .help-below { display: block; }
    """
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]  # help under or beside fields
    BINDINGS = [
        Binding("ctrl+s", "save", "Save settings", id="navi.settings.save"),
        Binding("escape,ctrl+z", "revert", "Revert changes", id="navi.settings.revert"),
        Binding("ctrl+t", "test_connection", "Test connection", id="navi.settings.test"),
        Binding("ctrl+r", "refresh_models", "Refresh models", id="navi.settings.models"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.loaded: dict[str, Any] | None = None  # the daemon's settings at the last load
        self.env_embedding_host: str | None = None  # the daemon's NAVI_EMBEDDING_HOST
        self.config_errors: list[str] = []  # what the daemon found wrong in config.toml

    def compose_body(self) -> ComposeResult:
        with Vertical(id="settings"):
            yield Static("", id="config-errors")
            yield Static("", id="empty")
            yield SettingsForm(self.app.available_themes, id="form")

    @property
    def form(self) -> SettingsForm:
        return self.query_one(SettingsForm)

    def on_mount(self) -> None:
        self._show_empty("Loading the settings from the Navi daemon…")
        if self.navi.link.connected:
            self.load()
        elif self.navi.link.state.state == "down":
            self._show_empty(self._down_text(self.navi.link.state.detail))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in NEEDS_SETTINGS and (self.loaded is None or self.has_class("-empty")):
            return None  # shown greyed out until the daemon has answered
        return True

    # -- loading -------------------------------------------------------------------------------

    @work(exclusive=True, group="settings-load", exit_on_error=False)
    async def load(self, keep_edits: bool = False) -> None:
        """Ask the daemon for the settings; ``keep_edits`` leaves the changed fields alone."""
        try:
            reply = await self.navi.link.call("settings.get")
        except DaemonUnavailable as err:  # the daemon is away: say so instead of a form
            self._show_empty(self._down_text(str(err)))
            return
        except Exception as err:
            self.navi.report(err, "Loading the settings")
            if self.loaded is None:
                self._show_empty(f"The settings could not be loaded: {err}")
            return
        self._apply(reply.get("settings") or {}, reply.get("errors") or [], keep_edits)
        unset = reply.get("unset") or {}
        self.env_embedding_host = unset.get(EMBEDDING_HOST.key)
        for key, value in unset.items():
            if key in FIELDS and value is not None:  # None: the field's own placeholder says
                self.form.show_unset(FIELDS[key], str(value))
        self.refresh_models()
        if self.focused is None and self.is_current:  # F4 came before the answer
            self.call_after_refresh(self.action_focus_main)  # once the form is shown

    def action_focus_main(self) -> None:
        """F4 and Alt+S: the first setting, so what is typed next edits it."""
        if self.loaded is None or self.has_class("-empty"):
            return  # no form yet: nothing to type into
        first = next((w for w in self.focus_chain if self.form in w.ancestors), None)
        if first is not None:
            first.focus()

    def _apply(self, settings: dict[str, Any], errors: list[str], keep_edits: bool) -> None:
        values = flatten(settings)
        for field in FIELDS.values():
            if keep_edits and self.form.dirty(field):
                continue  # the user's edit wins until saved or reverted
            self.form.put(field, values.get(field.key))
        self.loaded = values
        self._show_config_errors(errors)
        self.remove_class("-empty")
        self.refresh_bindings()

    def _show_config_errors(self, errors: list[str]) -> None:
        self.config_errors = list(errors)
        box = self.query_one("#config-errors", Static)
        box.set_class(bool(errors), "-shown")
        lines = [f"⚠ {e}" for e in capped(errors)]
        header = "config.toml has problems; those settings keep their default or last good value:"
        box.update(Text("\n".join([header, *lines])) if errors else "")  # not markup

    def _show_empty(self, text: str) -> None:
        self.query_one("#empty", Static).update(text)
        self.add_class("-empty")
        self.refresh_bindings()

    def _down_text(self, detail: str | None) -> str:
        return (
            "The settings are kept by the Navi daemon, which is not answering:\n"
            f"{detail or 'no reason given'}\n\n"
            "Once that is dealt with, Alt+G (or `navi daemon start`) starts it; this screen"
            " fills in as soon as it answers."
        )

    async def on_daemon(self, method: str, params: Any) -> None:
        if method == "settings.changed" and isinstance(params, dict):
            if self.loaded is None:
                self.load()
                return
            self._apply(params.get("settings") or {}, params.get("errors") or [], keep_edits=True)
            if HOSTS & set(params.get("changed") or []):
                self.refresh_models()
        elif method == "ollama.pull.progress" and isinstance(params, dict):
            for note in self.form.notes():
                if note.pulling and note.pulling == params.get("model"):
                    note.pull_progress(params)
        elif method == "ollama.state" and self.loaded is not None:
            self.refresh_models()  # Ollama came or went: its model list did too
        elif method == "link.state" and isinstance(params, LinkState):
            if params.state == "up":
                self.load(keep_edits=self.loaded is not None)
            elif params.state == "down":
                self._show_empty(self._down_text(params.detail))

    # -- checking as the user types ------------------------------------------------------------

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Switch.Changed)
    def _changed(self, event: Input.Changed | Select.Changed | Switch.Changed) -> None:
        field = self.form.field_of(event.control)
        if field is None or field.key not in self.form.shown:
            return  # a widget being filled before the first load
        self.form.check(field)
        if field.kind == MODEL:
            self.form.note(field).update_note()

    # -- saving --------------------------------------------------------------------------------

    def action_save(self) -> None:
        if self.loaded is None:
            return
        changes: dict[str, Any] = {}
        bad = []
        for field in self.form.dirty_fields():
            value, reason = self.form.check(field)
            if reason is not None:
                bad.append(field)
            elif value != self.loaded.get(field.key):
                changes[field.key] = value
        if bad:
            names = ", ".join(f.label for f in bad)
            self.notify(f"Not saved: fix {names} first.", severity="error")
            self.form.widget(bad[0]).focus()
            return
        if not changes:
            self.notify("Nothing to save: no setting was changed.")
            return
        self.save(changes)

    @work(exclusive=True, group="settings-save", exit_on_error=False)
    async def save(self, changes: dict[str, Any]) -> None:
        try:
            reply = await self.navi.link.call("settings.set", {"changes": changes})
        except Exception as err:
            self.navi.report(err, "Saving the settings")
            return
        self._apply(reply.get("settings") or {}, self.config_errors, keep_edits=False)
        names = ", ".join(FIELDS[k].label for k in changes)
        self.notify(f"Saved: {names}.", title="Settings")
        if HOSTS & set(changes):
            self.refresh_models()

    def action_revert(self) -> None:
        if self.loaded is None:
            return
        changed = bool(self.form.dirty_fields())
        self.load()
        if changed:
            self.notify("Reverted to the saved settings.", title="Settings")

    # -- Ollama --------------------------------------------------------------------------------

    def _host(self) -> tuple[bool, str | None]:
        """(valid, the host to ask): the typed host, or None for the configured one."""
        value, reason = self.form.check(HOST)
        return reason is None, value

    def _embedding_params(self) -> dict[str, Any] | None:
        """``ollama.models`` parameters for the embedding model's list, or None when the chat
        host's list serves (the embedding host is empty and NAVI_EMBEDDING_HOST unset)."""
        value, reason = self.form.check(EMBEDDING_HOST)
        if reason is not None:
            return {"embedding": True}  # a typo: the saved embedding host meanwhile
        host = value or self.env_embedding_host
        return None if host is None else {"host": host, "embedding": True}

    @on(Button.Pressed, "#test")
    def _test_pressed(self) -> None:
        self.action_test_connection()

    def action_test_connection(self) -> None:
        if self.loaded is None:
            return
        valid, host = self._host()
        if not valid:
            self.form.show_test("", ok=None)
            return
        self.form.show_test("Testing the connection…", ok=None)
        self.test_connection(host)

    @work(exclusive=True, group="settings-test", exit_on_error=False)
    async def test_connection(self, host: str | None) -> None:
        try:
            reply = await self.navi.link.call("ollama.test", {"host": host} if host else {})
        except Exception as err:
            self.form.show_test(f"✕ could not test: {err}", ok=False)
            self.navi.report(err, "Testing the connection")
            return
        where = reply.get("host") or host or "the default host"
        if reply.get("reachable"):
            version = reply.get("version") or "unknown version"
            self.form.show_test(f"✓ Ollama {version} answers at {where}", ok=True)
        else:
            self.form.show_test(f"✕ {reply.get('error') or 'not reachable'}", ok=False)
        self.refresh_models()  # the pickers list what this host has (or say it has none)

    def action_refresh_models(self) -> None:
        self.refresh_models()

    @work(exclusive=True, group="settings-models", exit_on_error=False)
    async def refresh_models(self) -> None:
        """List the models installed on the host in the form (it may not be saved yet)."""
        valid, host = self._host()
        asked = host if valid else None
        installed: list[dict[str, Any]] | None = None
        error: str | None = None
        where = asked or ""
        try:
            reply = await self.navi.link.call("ollama.models", {"host": asked} if asked else {})
            installed = list(reply.get("models") or [])
            where = reply.get("host") or where
        except Exception as err:  # Ollama down: the pickers keep the current value
            error = str(err)
        embedding = self.form.note(EMBEDDING_MODEL)
        for note in self.form.notes():
            if note is not embedding:
                note.set_models(installed, where, error)
        params = self._embedding_params()
        if params is not None:  # another host embeds: its own list
            installed, error, where = None, None, params.get("host") or ""
            try:
                reply = await self.navi.link.call("ollama.models", params)
                installed = list(reply.get("models") or [])
                where = reply.get("host") or where
            except Exception as err:
                error = str(err)
        embedding.set_models(installed, where, error)

    @on(ModelNote.PullRequested)
    def _pull_requested(self, event: ModelNote.PullRequested) -> None:
        embedding = event.note is self.form.note(EMBEDDING_MODEL)
        if self.form.dirty(HOST) or (embedding and self.form.dirty(EMBEDDING_HOST)):
            # ollama.pull uses the saved host; pulling elsewhere than the list shows would mislead
            self.notify("Save the new host first: models are pulled on the saved host.")
            return
        self.run_worker(
            self._pull(event.note, event.model, embedding),
            group=f"pull-{event.note.id}",
            exclusive=True,
            exit_on_error=False,
        )

    async def _pull(self, note: ModelNote, model: str, embedding: bool = False) -> None:
        note.pull_started(model)
        params: dict[str, Any] = {"model": model} | ({"embedding": True} if embedding else {})
        try:
            # A pull takes as long as the download does: no time limit on the call.
            await self.navi.link.call("ollama.pull", params)
        except Exception as err:
            self.call_next(note.pull_ended, str(err))
            self.navi.report(err, f"Pulling {model}")
            return
        # The progress notifications wait in this screen's queue: end after them, not before.
        self.call_next(note.pull_ended, None)
        self.call_next(self.refresh_models)
        self.navi.check_models()  # the banner and the status line follow the new list
