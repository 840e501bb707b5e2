"""The Navi app: three modes (chat, memory, settings) over one connection to the daemon.

The app owns the connection and the ``Status`` the status line and banner show. Daemon
notifications are published on ``event_signal``; screens subscribe to what they show, so the
inspector updates when memory changes without polling.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.signal import Signal
from textual.worker import Worker, WorkerState

from navi_desktop.config import Settings, load_settings
from navi_desktop.paths import Paths
from navi_desktop.tui.link import DaemonLink, LinkState
from navi_desktop.tui.status import Status, daemon_fields, same_model

Event = tuple[str, Any]  # (notification method, params)


def _screen(module: str, name: str) -> Screen[Any]:
    """A mode's screen, imported when first shown (start-up imports only the chat)."""
    return getattr(importlib.import_module(module), name)()


class NaviApp(App[None]):
    TITLE = "Navi"
    CSS = """
    Screen.-incognito { border: heavy $error; }
    """
    MODES = {
        "chat": lambda: _screen("navi_desktop.tui.chat.screen", "ChatScreen"),
        "memory": lambda: _screen("navi_desktop.tui.inspector.screen", "InspectorScreen"),
        "settings": lambda: _screen("navi_desktop.tui.settings.screen", "SettingsScreen"),
    }
    DEFAULT_MODE = "chat"
    BINDINGS = [
        Binding("f2", "mode('chat')", "Chat", id="navi.mode.chat"),
        Binding("f3", "mode('memory')", "Memory", id="navi.mode.memory"),
        Binding("f4", "mode('settings')", "Settings", id="navi.mode.settings"),
        Binding("ctrl+o", "toggle_incognito", "Incognito", id="navi.incognito"),
        Binding("f1", "toggle_keys", "Keys", id="navi.help"),
        Binding("ctrl+q", "quit", "Quit", id="navi.quit", priority=True),
    ]

    def __init__(
        self,
        paths: Paths,
        *,
        profile: str | None = None,
        incognito: bool | None = None,
        autostart: bool = True,
        watch_css: bool = False,
    ) -> None:
        super().__init__(watch_css=watch_css)
        self.paths = paths
        self.settings, errors = load_settings(paths.config_file)
        self.profile = profile
        self.start_incognito = (
            self.settings.incognito.start_incognito if incognito is None else incognito
        )
        self.status = Status(
            profile=profile or self.settings.memory.effective_profile(),
            incognito=self.start_incognito,
        )
        self.status_signal: Signal[Status] = Signal(self, "status")
        self.event_signal: Signal[Event] = Signal(self, "event")
        self.link = DaemonLink(
            paths,
            profile=profile,
            on_event=self._on_daemon_event,
            on_state=self._on_link_state,
            autostart=autostart,
        )
        self._config_errors = [str(e) for e in errors]
        self._apply_ui_settings(self.settings)

    # -- start ---------------------------------------------------------------------------------

    def on_mount(self) -> None:
        for problem in self._config_errors:
            self.notify(problem, title="config.toml", severity="warning", timeout=10)
        self.run_worker(self.link.run(), name="daemon link", group="link", exit_on_error=False)

    def _apply_ui_settings(self, settings: Settings) -> None:
        if settings.ui.theme in self.available_themes:
            self.theme = settings.ui.theme
        self.set_keymap(dict(settings.ui.keymap))

    # -- the daemon's side ---------------------------------------------------------------------

    def set_status(self, **changes: Any) -> None:
        self.status = replace(self.status, **changes)
        self.status_signal.publish(self.status)

    def _on_link_state(self, state: LinkState) -> None:
        self.set_status(daemon=state.state, daemon_detail=state.detail)
        if state.state == "up":
            self.refresh_status()
            self.check_models()
        self.event_signal.publish(("link.state", state))

    def _on_daemon_event(self, method: str, params: Any) -> None:
        if method == "ollama.state" and isinstance(params, dict):
            self.set_status(
                ollama_host=params.get("host"),
                ollama_reachable=bool(params.get("reachable")),
                ollama_error=params.get("error"),
            )
            self.refresh_status()
            self.check_models()
        elif method in ("memory.changed", "session.state", "session.updated"):
            self.refresh_status()
        elif method == "settings.changed" and isinstance(params, dict):
            self._settings_changed(params)
        self.event_signal.publish((method, params))

    def _settings_changed(self, params: dict[str, Any]) -> None:
        from navi_desktop.config import parse_settings

        settings, _ = parse_settings(params.get("settings") or {}, self.settings)
        self.settings = settings
        self._apply_ui_settings(settings)
        self.set_status(profile=self.profile or settings.memory.effective_profile())
        self.refresh_status()
        self.check_models()

    @work(exclusive=True, group="status", exit_on_error=False)
    async def refresh_status(self) -> None:
        """Ask the daemon for the figures on the status line (after each change it reports)."""
        try:
            daemon = await self.link.call("daemon.status")
            stats = await self.link.memory("stats")
        except Exception:  # the link reports a lost daemon itself; figures wait for it
            return
        self.set_status(**daemon_fields(daemon, stats))

    @work(exclusive=True, group="models", exit_on_error=False)
    async def check_models(self) -> None:
        """Which configured models Ollama lacks: when Ollama or the settings change, not on
        every memory change (listing models is an HTTP round trip per model)."""
        try:
            reply = await self.link.call("ollama.models")
        except Exception:  # Ollama unreachable: the banner already says so
            self.set_status(missing_models=())
            return
        installed = [m["name"] for m in reply.get("models", [])]
        wanted = [self.settings.ollama.chat_model]
        if self.settings.memory.embedder == "ollama":
            wanted.append(self.settings.ollama.embedding_model)
        missing = tuple(m for m in wanted if not any(same_model(m, i) for i in installed))
        self.set_status(missing_models=missing)

    # -- actions -------------------------------------------------------------------------------

    def report(self, err: BaseException, doing: str) -> None:
        """An error as a notification that names what failed and why (never a traceback)."""
        self.notify(f"{doing} failed: {err}", severity="error", timeout=8)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The net under every worker: an unexpected error becomes a notification."""
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.report(event.worker.error, event.worker.name or "A background task")

    async def action_mode(self, mode: str) -> None:
        await self.switch_mode(mode)

    async def action_toggle_incognito(self) -> None:
        if self.current_mode != "chat":
            await self.switch_mode("chat")
        await self.screen.run_action("toggle_incognito")

    def action_toggle_keys(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Every Navi binding that applies here is also a palette command."""
        seen: set[str] = set()
        for active in screen.active_bindings.values():
            binding = active.binding
            if not (binding.id or "").startswith("navi.") or binding.id in seen:
                continue
            if not binding.description or not active.enabled:
                continue
            seen.add(binding.id or "")
            key = self.get_key_display(binding)
            help_text = binding.tooltip or f"{binding.description} ({key})"
            yield SystemCommand(
                binding.description, help_text, partial(active.node.run_action, binding.action)
            )
        yield from super().get_system_commands(screen)
