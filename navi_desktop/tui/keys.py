"""Navi's keys: the F1 panel and the command palette's entries, both drawn from the bindings
that apply on the screen (so a user's keymap shows as it is), once each, Navi's own first.

Textual's own help panel listed some thirty text-area cursor keys first, and its palette
added a second "Quit" and "Keys"; neither said which keys are Navi's.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widgets import Label, Static

from navi_desktop.fileio import write_private_atomic

TEXT_KEYS = (
    "In text fields: the usual editing keys (arrows, Home/End, Ctrl+W deletes a word, "
    "Ctrl+U the line, Ctrl+Z undoes). Tab moves between fields."
)


@dataclass
class Command:
    id: str
    title: str
    help: str
    action: str
    node: DOMNode
    keys: list[str] = field(default_factory=list)
    everywhere: bool = False  # an app binding rather than this screen's
    enabled: bool = True


def collect(screen: Screen[Any], *, all_keys: bool = False) -> list[Command]:
    """Navi's bindings on ``screen``, one per binding id, with every key the id is bound to
    (the keymap included). Only those that apply now, unless ``all_keys`` (the F1 panel also
    lists, dimmed, what needs a reply or a session first)."""
    app = screen.app
    active = screen.active_bindings
    chain = (
        [(node, binding) for node, bindings in screen._binding_chain for binding in _each(bindings)]
        if all_keys
        else [(a.node, a.binding) for a in active.values()]
    )
    found: dict[str, Command] = {}
    for node, binding in chain:
        ident = binding.id or ""
        if not ident.startswith("navi.") or not binding.description:
            continue
        applies = active.get(binding.key)
        if not all_keys and applies is None:
            continue
        command = found.get(ident)
        if command is None:
            command = found[ident] = Command(
                ident,
                binding.description,
                binding.tooltip or binding.description,
                binding.action,
                node,
                everywhere=isinstance(node, App),
                enabled=applies is not None and applies.binding.id == ident and applies.enabled,
            )
        key = app.get_key_display(binding)
        if key not in command.keys:
            command.keys.append(key)
    return list(found.values())


def _each(bindings: Any) -> Iterator[Binding]:
    for key_bindings in bindings.key_to_bindings.values():
        yield from key_bindings


def navi_commands(screen: Screen[Any]) -> Iterator[Command]:
    """The palette's Navi entries: what can be done here now, text-editing keys left out."""
    for command in collect(screen):
        if command.enabled and not command.id.startswith("navi.prompt."):
            command.help = f"{command.help} · {' / '.join(command.keys)}"
            yield command


def keys_table(commands: list[Command]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True, style="bold")
    table.add_column()
    for command in commands:
        description = Text(command.title, style="" if command.enabled else "dim")
        table.add_row(" / ".join(command.keys), description)
    return table


class KeysScreen(ModalScreen[None]):
    """F1: the keys of the screen beneath (its own first, then those that work everywhere)."""

    DEFAULT_CSS = """
    KeysScreen { align: center middle; }
    KeysScreen > Vertical { width: 76; max-width: 100%; height: auto; max-height: 100%;
                            border: thick $primary; background: $surface; padding: 0 1; }
    KeysScreen .title { text-style: bold; padding: 0 1; width: 1fr; }
    KeysScreen VerticalScroll { height: auto; max-height: 1fr; }
    KeysScreen .section { color: $accent; text-style: bold; margin-top: 1; }
    KeysScreen .hint { color: $text-muted; margin-top: 1; }
    """
    BINDINGS = [
        Binding("escape,f1,alt+k", "dismiss", "Close", show=False),
    ]

    def __init__(self, beneath: Screen[Any]) -> None:
        super().__init__()
        self.commands = collect(beneath, all_keys=True)

    def compose(self) -> ComposeResult:
        here = [c for c in self.commands if not c.everywhere]
        everywhere = sorted(
            (c for c in self.commands if c.everywhere), key=lambda c: c.action == "quit"
        )
        with Vertical():
            yield Label("Keys  (Esc closes; Ctrl+P finds any command)", classes="title")
            with VerticalScroll():
                if here:
                    yield Label("Here", classes="section")
                    yield Static(keys_table(here), id="keys-here")
                yield Label("Everywhere", classes="section")
                yield Static(keys_table(everywhere), id="keys-everywhere")
                yield Static(TEXT_KEYS, classes="hint")


def save_screenshot(app: App[Any]) -> Path:
    """An SVG of the screen in the downloads folder (made when missing; the home folder when
    it cannot be); returns where it went. Private (0600), like an export: it shows what the
    user said and what Navi remembers, and a downloads folder is often readable by others."""
    import platformdirs

    folder = Path(platformdirs.user_downloads_dir())
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path.home()
    stamp = time.strftime("%Y-%m-%d %H-%M-%S")
    path = folder / f"Navi {stamp}.svg"
    for n in itertools.count(2):  # a second within the same second: never over another
        if not os.path.lexists(path):
            break
        path = folder / f"Navi {stamp} ({n}).svg"
    write_private_atomic(path, app.export_screenshot())
    return path
