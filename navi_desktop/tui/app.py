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

from textual import events, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.markup import escape
from textual.screen import Screen
from textual.signal import Signal
from textual.worker import Worker, WorkerState

from navi_desktop.config import Settings, load_settings
from navi_desktop.paths import Paths
from navi_desktop.terminal_text import safe
from navi_desktop.tui.garbage import full_collections
from navi_desktop.tui.keys import navi_commands, save_screenshot
from navi_desktop.tui.link import DaemonLink, LinkState
from navi_desktop.tui.status import Status, daemon_fields, learning_of, same_model

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
    # Every F-key has an Alt alternative: some terminals and multiplexers swallow F-keys.
    # (Not Alt+digit: Textual reads Esc+digit as a character, e.g. Alt+3 as "£".)
    BINDINGS = [
        Binding("f1,alt+k", "toggle_keys", "Keys", tooltip="Navi's keys", id="navi.help"),
        Binding("f2,alt+c", "mode('chat')", "Chat", tooltip="Go to the chat", id="navi.mode.chat"),
        Binding(
            "f3,alt+m", "mode('memory')", "Memory", tooltip="Open the memory", id="navi.mode.memory"
        ),
        Binding(
            "f4,alt+s", "mode('settings')", "Settings", tooltip="Settings", id="navi.mode.settings"
        ),
        Binding(
            "ctrl+o",
            "toggle_incognito",
            "Incognito",
            show=False,
            tooltip="Start or leave an incognito chat",
            id="navi.incognito",
        ),
        Binding("alt+g", "start_daemon", "Start the daemon", show=False, id="navi.daemon.start"),
        Binding("ctrl+q", "quit", "Quit", show=False, id="navi.quit", priority=True),
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
            config_errors=tuple(str(e) for e in errors),  # the banner shows them
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
        self._progress_notes = 0  # session.progress notifications received
        self._apply_ui_settings(self.settings)

    # -- start ---------------------------------------------------------------------------------

    def on_mount(self) -> None:
        full_collections.start()
        self.run_worker(self.link.run(), name="daemon link", group="link", exit_on_error=False)

    def on_unmount(self) -> None:
        full_collections.stop()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.InputEvent):  # keys and the mouse reach the app first
            full_collections.touch()  # a thorough garbage collection waits for a pause
        await super().on_event(event)

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
        if state.state != "up":  # its session ends are no longer known (a restart resumes them)
            self.set_status(learning=())
        self.refresh_bindings()  # "Start the daemon" applies only while it is down
        if state.state == "up":
            self.refresh_status()
            self.check_models()
            self.check_host()
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
        elif method in ("memory.changed", "memory.embedding", "session.state", "session.updated"):
            self.refresh_status()
        elif method == "session.progress" and isinstance(params, dict):
            # A session end moved on: the status line says how far ("learning: part 2 of 5").
            self._progress_notes += 1
            self.set_status(learning=learning_of(params.get("extracting"), self.status.profile))
        elif method == "memory.scrubbed":  # a forget's scrub that waited for a reader
            self.notify(
                "The memory file no longer holds any copy of what you made Navi forget.",
                title="Forgetting complete",
                timeout=10,
            )
        elif method == "settings.changed" and isinstance(params, dict):
            self._settings_changed(params)
        elif method == "ollama.pull.progress" and (params or {}).get("status") == "success":
            self.check_models()  # a pulled model clears its banner at once
        self.event_signal.publish((method, params))

    def _settings_changed(self, params: dict[str, Any]) -> None:
        from navi_desktop.config import parse_settings

        settings, _ = parse_settings(params.get("settings") or {}, self.settings)
        self.settings = settings
        self._apply_ui_settings(settings)
        self.set_status(
            profile=self.profile or settings.memory.effective_profile(),
            config_errors=tuple(str(e) for e in params.get("errors") or ()),
        )
        self.refresh_status()
        self.check_models()
        self.check_host()

    @work(exclusive=True, group="status", exit_on_error=False)
    async def refresh_status(self) -> None:
        """Ask the daemon for the figures on the status line (after each change it reports)."""
        from navi_desktop.errors import CorruptDatabase

        notes = self._progress_notes
        try:
            daemon = await self.link.call("daemon.status")
        except Exception:  # the link reports a lost daemon itself; figures wait for it
            return
        fields = daemon_fields(daemon, None, self.status.profile)
        try:
            fields |= daemon_fields(daemon, await self.link.memory("stats"), self.status.profile)
        except CorruptDatabase as err:  # the profile's file: the banner says what and how to fix
            fields["profile_error"] = str(err)
        except Exception:  # the daemon's status says why, when it knows (a server away)
            if not fields.get("profile_error"):
                return
        if notes != self._progress_notes:  # a progress notification meanwhile is newer
            del fields["learning"]
        self.set_status(**fields)

    @work(exclusive=True, group="host", exit_on_error=False)
    async def check_host(self) -> None:
        """Whether OLLAMA_HOST here is the host the (already running) daemon uses."""
        import os

        if not os.environ.get("OLLAMA_HOST"):
            return
        from navi_desktop.ollama_host import host_note

        try:
            reply = await self.link.call("settings.get")
        except Exception:  # the link reports a lost daemon itself
            return
        self.set_status(host_note=host_note(reply))

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
        wanted = [(self.settings.ollama.chat_model, installed)]
        if self.settings.memory.embedder == "ollama":
            there = installed
            if reply.get("embedding_host"):  # another host embeds: the model must be there
                try:
                    other = await self.link.call("ollama.models", {"embedding": True})
                    there = [m["name"] for m in other.get("models", [])]
                except Exception:  # unreachable: daemon.status says so
                    there = None
            if there is not None:
                wanted.append((self.settings.ollama.embedding_model, there))
        missing = tuple(m for m, names in wanted if not any(same_model(m, i) for i in names))
        self.set_status(missing_models=missing)

    # -- actions -------------------------------------------------------------------------------

    def report(self, err: BaseException, doing: str) -> None:
        """An error as a notification that names what failed and why (never a traceback)."""
        self.notify(escape(f"{doing} failed: {err}"), severity="error", timeout=8)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The net under every worker: an unexpected error becomes a notification."""
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.report(event.worker.error, event.worker.name or "A background task")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "start_daemon":
            return self.status.daemon == "down"
        return True

    def action_start_daemon(self) -> None:
        self.set_status(daemon="connecting", daemon_detail="starting the Navi daemon…")
        self.link.start()

    async def action_mode(self, mode: str) -> None:
        await self.switch_mode(mode)
        # Each mode's main field takes the keys typed next (F2: the prompt, never the list).
        await self.screen.run_action("focus_main")

    async def action_toggle_incognito(self) -> None:
        if self.current_mode != "chat":
            await self.switch_mode("chat")
        await self.screen.run_action("toggle_incognito")

    def action_toggle_keys(self) -> None:
        from navi_desktop.tui.keys import KeysScreen  # with its first use

        if isinstance(self.screen, KeysScreen):
            self.screen.dismiss()
        else:
            self.push_screen(KeysScreen(self.screen))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Navi's own commands first, once each (every binding that applies here), then the
        few of Textual's that Navi has no key for."""
        for command in navi_commands(screen):
            yield SystemCommand(
                command.title, command.help, partial(command.node.run_action, command.action)
            )
        for command in super().get_system_commands(screen):
            if command.title in ("Theme", "Maximize", "Minimize"):
                yield command
        yield SystemCommand("Screenshot", "Save an SVG picture of the screen", self.screenshot)

    def screenshot(self) -> None:
        """Into the user's downloads folder (made when missing), and say where."""
        try:
            path = save_screenshot(self)
        except OSError as err:
            self.report(err, "The screenshot")
            return
        self.notify(f"Screenshot saved to {safe(str(path))}", title="Screenshot", timeout=10)
