"""Text fields that apply a burst of keys in the order they were typed.

Textual inserts a printable key in the focused widget's own ``_on_key``, but runs a key
*binding* (Backspace is ``delete_left``) only after the key has bubbled up to the app. In a
burst (a fast typist, a paste of keys, tmux ``send-keys``), the letters typed after a
Backspace were inserted before it ran, and it then deleted them: "teacup", six Backspaces and
"Bruno" became "teacu" (benchmarks/textual_key_order.py reproduces it without Navi; upstream:
Textualize/textual#6605, with a fix of the same shape proposed in #6631). These fields run
their own bindings in their own queue, in order with the letters; keys bound on the screen or
the app (Ctrl+N, F-keys) still take the usual way. A paste loses its control characters.
"""

from __future__ import annotations

import contextlib
from typing import Any

from textual import events
from textual.binding import Binding
from textual.dom import NoScreen
from textual.widgets import Input, TextArea

from navi_desktop.terminal_text import safe
from navi_desktop.tui.frames import InputFirst


class InOrder:
    """Mixed in before a Textual text widget."""

    async def _on_key(self, event: events.Key) -> None:
        binding = self._own_binding(event.key)
        if binding is not None:
            event.stop()
            event.prevent_default()
            await self.run_action(binding.action)  # type: ignore[attr-defined]
        elif event.key.startswith("alt+"):
            # An Alt key is never text (a layout's own characters arrive as themselves), but
            # Textual gives Alt+G the character "g": inserted, it never reached its binding.
            # Not stopped: it bubbles on to the screen's and the app's bindings.
            event.prevent_default()
        else:
            await super()._on_key(event)  # type: ignore[misc]
        # Drawn at once while a reply streams (frames.py); a key that closed its dialog left
        # the field without a screen.
        with contextlib.suppress(NoScreen):
            screen = self.screen  # type: ignore[attr-defined]
            if isinstance(screen, InputFirst):
                screen.draw_soon(self)  # type: ignore[arg-type]

    def _on_paste(self, event: events.Paste) -> None:
        # A paste can carry escape sequences (a web page puts what it likes on the clipboard),
        # and the field would send them on to the terminal. The widget's own handler, next in
        # Textual's dispatch, inserts what is left.
        event.text = safe(event.text.replace("\r\n", "\n").replace("\r", "\n"))

    def _own_binding(self, key: str) -> Binding | None:
        """This widget's binding for ``key`` as the screen resolves it (the user's keymap
        applied), when it may run now."""
        screen: Any = self.screen  # type: ignore[attr-defined]
        for node, bindings in screen._binding_chain:
            if node is not self:
                continue
            for binding in bindings.key_to_bindings.get(key, []):
                if binding.priority:
                    continue  # the app ran those before the key came here
                name = binding.action.partition("(")[0]
                if self.check_action(name, ()) is True:  # type: ignore[attr-defined]
                    return binding
        return None


class OrderedInput(InOrder, Input):
    """An Input that applies Backspace, Delete, arrows and the rest in typing order."""


class OrderedTextArea(InOrder, TextArea):
    """A TextArea that applies Backspace, Delete, arrows and the rest in typing order."""
