"""Textual's Footer, rebuilt only when the keys it shows change."""

from __future__ import annotations

from typing import Any

from textual.widgets import Footer as TextualFooter


class Footer(TextualFooter):
    """Every focus change, screen resume and keymap update asks the footer to rebuild its
    keys. At start-up five such asks came around the first frame, each rebuilding every key
    widget the same as before (a tenth of the time to that frame); only a change is drawn."""

    _shown: tuple[Any, ...] | None = None

    def _keys(self) -> tuple[Any, ...]:
        """What compose() would show: the shown bindings and the command palette's key."""
        palette = self.app.COMMAND_PALETTE_BINDING
        return (
            self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE,
            tuple(
                (key, b.key, b.description, b.action, b.group, enabled, tooltip)
                for key, (_, b, enabled, tooltip) in self.screen.active_bindings.items()
                if b.show or key == palette
            ),
        )

    async def recompose(self) -> None:
        keys = self._keys()
        if keys == self._shown:
            return
        self._shown = keys
        await super().recompose()
