"""The form: one row per setting (label, widget, help, and the reason it is invalid in red).

The form remembers what it last showed for each key (``shown``), so "the user changed this"
is simply "the widget no longer holds what was loaded into it": live updates skip those
fields, and a save sends only them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, Static, Switch

from navi_desktop.config_specs import EMBEDDERS
from navi_desktop.tui.settings.fields import (
    CHOICE,
    FIELDS,
    MODEL,
    SECTIONS,
    SWITCH,
    Field,
    from_widget,
    to_widget,
)
from navi_desktop.tui.settings.models import ModelNote
from navi_desktop.tui.widgets.ordered import OrderedInput


class FieldRow(Vertical):
    DEFAULT_CSS = """
    FieldRow { height: auto; }
    FieldRow > .line { height: auto; }
    FieldRow .label { width: 22; padding-right: 1; }
    FieldRow .control { width: 44; height: auto; }
    FieldRow .control > Input { width: 1fr; }
    FieldRow .control > Select { width: 1fr; }
    FieldRow .control > Switch { border: none; padding: 0 1; height: 1; }
    FieldRow .control > Button { margin-left: 1; }
    FieldRow .help { width: 1fr; color: $text-muted; padding-left: 2; }
    FieldRow .help-below { display: none; color: $text-muted; margin-left: 22; }
    FieldRow .error, FieldRow .extra { margin-left: 22; }
    FieldRow .error { color: $error; display: none; }
    FieldRow .error.-shown { display: block; }
    """

    def __init__(self, field: Field, controls: Iterable[Widget], extras: Iterable[Widget]) -> None:
        super().__init__(id=f"{field.widget_id}-row")
        self.field = field
        self._controls = list(controls)
        self._extras = list(extras)

    def compose(self) -> ComposeResult:
        with Horizontal(classes="line"):
            yield Label(self.field.label, classes="label")
            with Horizontal(classes="control"):
                yield from self._controls
            yield Static(self.field.help, classes="help")
        # On a narrow screen the help goes under the field, not into a sliver beside it.
        yield Static(self.field.help, classes="help-below")
        # What the user typed and what a server said are shown as text, never read as markup.
        yield Static("", id=f"{self.field.widget_id}-error", classes="error", markup=False)
        for extra in self._extras:
            extra.add_class("extra")
            yield extra


class SettingsForm(VerticalScroll):
    # Its fields take the focus, never the scroll box itself: focused, it took what was typed
    # after F4 and did nothing with it (a focused field scrolls into view by itself).
    can_focus = False

    DEFAULT_CSS = """
    SettingsForm { height: 1fr; padding: 0 1; }
    SettingsForm .section { text-style: bold; color: $accent; margin-top: 1; }
    SettingsForm #test-result { color: $text-muted; display: none; }
    SettingsForm #test-result.-shown { display: block; }
    SettingsForm #test-result.-ok { color: $success; }
    SettingsForm #test-result.-bad { color: $error; }
    """

    def __init__(self, themes: Iterable[str], **kw: Any) -> None:
        super().__init__(**kw)
        self.choices: dict[str, list[str]] = {
            "memory.embedder": list(EMBEDDERS),
            "ui.theme": sorted(themes),
        }
        self.shown: dict[str, Any] = {}  # key -> what was last loaded into its widget

    def compose(self) -> ComposeResult:
        for title, fields in SECTIONS:
            yield Label(title, classes="section")
            for field in fields:
                yield FieldRow(field, self._controls(field), self._extras(field))

    def _controls(self, field: Field) -> list[Widget]:
        wid = field.widget_id
        if field.kind == SWITCH:
            return [Switch(id=wid)]
        if field.kind == CHOICE:
            options = [(c, c) for c in self.choices[field.key]]
            return [Select(options, id=wid, compact=True, allow_blank=False)]
        if field.kind == MODEL:
            return [Select[str]([], id=wid, compact=True)]
        widgets: list[Widget] = [OrderedInput(placeholder=field.placeholder, id=wid, compact=True)]
        if field.key == "ollama.host":
            widgets.append(Button("Test connection", id="test", compact=True))
        return widgets

    def _extras(self, field: Field) -> list[Widget]:
        if field.kind == MODEL:
            return [ModelNote(field.widget_id)]
        if field.key == "ollama.host":
            return [Static("", id="test-result", markup=False)]
        return []

    # -- values --------------------------------------------------------------------------------

    def widget(self, field: Field) -> Any:
        return self.query_one(f"#{field.widget_id}")

    def note(self, field: Field) -> ModelNote:
        return self.query_one(f"#{field.widget_id}-note", ModelNote)

    def notes(self) -> list[ModelNote]:
        return list(self.query(ModelNote))

    def show_unset(self, field: Field, value: str) -> None:
        """Show in an empty text field what leaving it empty means (a daemon's default)."""
        widget = self.widget(field)
        if isinstance(widget, Input):
            widget.placeholder = value

    def get(self, field: Field) -> Any:
        """What the widget holds now (text, bool or the chosen option)."""
        value = self.widget(field).value
        return "" if value is Select.NULL else value

    def put(self, field: Field, value: Any) -> None:
        """Load a setting's value into its widget; the field counts as unchanged after."""
        shown = to_widget(field, value)
        widget = self.widget(field)
        if field.kind == MODEL:
            self.note(field).set_value(shown or "")
        elif field.kind == CHOICE:
            if shown not in self.choices[field.key]:  # e.g. a theme this version lacks
                self.choices[field.key].append(shown)
                widget.set_options([(c, c) for c in self.choices[field.key]])
            widget.value = shown
        else:
            widget.value = shown
        self.shown[field.key] = self.get(field)
        self.show_error(field, None)

    def dirty(self, field: Field) -> bool:
        return field.key in self.shown and self.get(field) != self.shown[field.key]

    def dirty_fields(self) -> list[Field]:
        return [f for f in FIELDS.values() if self.dirty(f)]

    def check(self, field: Field) -> tuple[Any, str | None]:
        """(value, None) or (None, reason); the reason is shown under the field."""
        try:
            value, reason = from_widget(field, self.get(field)), None
        except ValueError as err:
            value, reason = None, str(err)
        # A value loaded from the file is the daemon's to judge (it reports it at the top).
        self.show_error(field, reason if self.dirty(field) else None)
        return value, reason

    def show_error(self, field: Field, reason: str | None) -> None:
        error = self.query_one(f"#{field.widget_id}-error", Static)
        error.update(f"✕ {reason}" if reason else "")
        error.set_class(bool(reason), "-shown")

    def show_test(self, text: str, *, ok: bool | None) -> None:
        result = self.query_one("#test-result", Static)
        result.update(text)
        result.set_class(bool(text), "-shown")
        result.set_class(ok is True, "-ok")
        result.set_class(ok is False, "-bad")

    def field_of(self, widget: Widget) -> Field | None:
        for field in FIELDS.values():
            if widget.id == field.widget_id:
                return field
        return None
