"""The key footer: only the keys that fit, whole, and rebuilt only when they change."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.events import Resize
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey

KEYS_ID = "navi.help"  # F1 lists every key: it stays when others must go


class Footer(TextualFooter):
    """Textual's footer cut its last key mid-word on a narrow terminal ("What did you us").
    This one shows the keys in their order while they fit whole, and always F1 (which lists
    them all) and the palette's key.

    Every focus change, screen resume and keymap update asks the footer to rebuild its keys.
    At start-up five such asks came around the first frame, each rebuilding every key widget
    the same as before (a tenth of the time to that frame); only a change is drawn."""

    _shown: tuple[Any, ...] | None = None

    def _fitting(self) -> list[tuple[Any, bool, str]]:
        """(binding, enabled, tooltip) of the keys shown: one per action, while they fit."""
        width = self.size.width or self.app.size.width
        seen: set[str] = set()
        shown: list[tuple[Any, bool, str]] = []
        palette = None
        for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items():
            if key == self.app.COMMAND_PALETTE_BINDING:
                palette = binding
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            shown.append((binding, enabled, tooltip))
        used = self._width(palette) + 2 if palette is not None else 0
        keep = [entry for entry in shown if entry[0].id == KEYS_ID]
        used += sum(self._width(b) for b, _, _ in keep)
        fitting = []
        for entry in shown:
            if entry in keep:
                fitting.append(entry)
                continue
            cost = self._width(entry[0])
            if used + cost <= width:
                fitting.append(entry)
                used += cost
        return fitting

    def _width(self, binding: Any) -> int:
        """Cells one key takes: the key with a cell each side, the description and a cell."""
        return len(self.app.get_key_display(binding)) + 2 + len(binding.description) + 1

    def _keys(self) -> tuple[Any, ...]:
        palette = self.app.COMMAND_PALETTE_BINDING
        return (
            self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE,
            palette in self.screen.active_bindings,
            tuple(
                (b.key, b.description, b.action, enabled, tooltip)
                for b, enabled, tooltip in self._fitting()
            ),
        )

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        for binding, enabled, tooltip in self._fitting():
            yield FooterKey(
                binding.key,
                self.app.get_key_display(binding),
                binding.description,
                binding.action,
                disabled=not enabled,
                tooltip=tooltip,
            ).data_bind(compact=TextualFooter.compact)
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            active = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
            if active is not None:
                _, binding, enabled, tooltip = active
                yield FooterKey(
                    binding.key,
                    self.app.get_key_display(binding),
                    binding.description,
                    binding.action,
                    classes="-command-palette",
                    disabled=not enabled,
                    tooltip=binding.tooltip or binding.description,
                )

    async def recompose(self) -> None:
        keys = self._keys()
        if keys == self._shown:
            return
        self._shown = keys
        await super().recompose()

    def on_resize(self, event: Resize) -> None:
        if self.is_attached:
            self.call_after_refresh(self.recompose)
