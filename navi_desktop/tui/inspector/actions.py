"""What the user can do to the highlighted memory: forget, edit, pin, confirm, set when it
expires, review the inbox (accept, edit then accept, reject), open the session it came from,
and export the whole memory."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from textual import work
from textual.markup import escape

from navi_desktop.daemon.client import RemoteNotFound
from navi_desktop.errors import InvalidInput
from navi_desktop.expiry import describe as describe_expiry
from navi_desktop.expiry import parse_expires
from navi_desktop.limits import check_memory_fields
from navi_desktop.terminal_text import safe
from navi_desktop.tui.dialogs import ConfirmScreen, ask_text, confirmed, forget_body
from navi_desktop.tui.export import export_to
from navi_desktop.tui.inspector.lists import clip

if TYPE_CHECKING:
    from navi_desktop.tui.app import NaviApp
    from navi_desktop.tui.inspector.data import Memory, Tab

# Actions that need a highlighted memory, and those that only apply to a held candidate.
ON_MEMORY = {
    "forget",
    "edit",
    "pin",
    "confirm",
    "expires",
    "accept",
    "edit_accept",
    "reject",
    "open_session",
}
ON_CANDIDATE = {"accept", "edit_accept", "reject"}
PINNABLE = ("active", "held", "archived")


def describe(memory: Memory) -> str:
    key = memory.get("key")
    return f"{key}: {clip(memory['value'])}" if key else clip(memory["value"])


def export_name(profile: str) -> str:
    return f"navi-memory-{re.sub(r'[^A-Za-z0-9_.-]', '_', profile)}.md"


class MemoryActions:
    """Mixed into ``InspectorScreen``, which provides what is declared here."""

    if TYPE_CHECKING:
        navi: NaviApp
        app: NaviApp
        current: Memory | None
        tab: Tab

        def forget_locally(self, ids: list[int]) -> None: ...
        def replace_locally(self, memory: Memory) -> None: ...
        def notify(self, message: str, **kw: object) -> None: ...
        def query_one(self, selector: str) -> object: ...

    def can(self, action: str) -> bool | None:
        """For ``check_action``: None greys a key out, False hides it (inbox keys elsewhere)."""
        if action not in ON_MEMORY:
            return True
        if action in ON_CANDIDATE and not self.tab.inbox:
            return False
        memory = self.current
        if memory is None:
            return None
        status = memory["status"]
        allowed = {
            "edit": status != "superseded",  # the daemon edits only the current version
            "pin": status in PINNABLE,
            "confirm": memory.get("kind") == "fact" and status == "active",
            "expires": memory.get("kind") == "fact" and status != "superseded",
            "open_session": bool(memory.get("session_id")),
        }.get(action, action not in ON_CANDIDATE or status == "held")
        return True if allowed else None

    def action_focus_search(self) -> None:
        self.query_one("#search").focus()  # type: ignore[attr-defined]

    @work(exclusive=True, group="inspector-action", exit_on_error=False)
    async def action_forget(self) -> None:
        memory = self.current
        if memory is not None:
            await self._ask_forget(memory, "Forget this memory?", "Forget", "Forgotten")

    @work(exclusive=True, group="inspector-action", exit_on_error=False)
    async def action_reject(self) -> None:
        memory = self.current
        if memory is not None:
            await self._ask_forget(memory, "Reject this candidate?", "Reject", "Rejected")

    async def _ask_forget(self, memory: Memory, title: str, verb: str, done: str) -> None:
        """Show where else the memory occurs (the daemon's preview), then forget it in the
        scope the user picks: everywhere, or only the memory and its evidence."""
        try:
            preview = await self.navi.link.memory("forget_preview", memory["id"])
        except RemoteNotFound:
            self._gone_already(memory)
            return
        except Exception as err:
            self.navi.report(err, "Looking up where it occurs")
            return
        narrower = preview["evidence"] != preview["everywhere"]
        answer = await self.app.push_screen_wait(
            ConfirmScreen(
                title,
                forget_body(describe(memory), preview),
                yes=f"{verb} everywhere" if narrower else verb,
                middle=[("evidence", "Only it and its evidence", "warning")] if narrower else None,
            )
        )
        if confirmed(answer):
            await self._forget(memory, done, "everywhere")
        elif answer == "evidence":
            await self._forget(memory, f"{done}; other mentions kept", "evidence")

    def _gone_already(self, memory: Memory, doing: str | None = None) -> None:
        """Forgotten meanwhile (from the command line, another window) before the daemon heard
        of the change: for a forget what was wanted; for any other action (``doing``) there is
        nothing left to act on. Said so, never as "no memory with id N" or a dialog that asks
        again for ever."""
        self.forget_locally([memory["id"]])
        if doing is None:
            self.notify("Already forgotten (from elsewhere, meanwhile)")
        else:
            self.notify(f"Not {doing}: it was forgotten meanwhile (from elsewhere)")

    async def _forget(self, memory: Memory, done: str, scope: str) -> None:
        try:
            report = await self.navi.link.memory("forget", memory["id"], scope=scope)
        except RemoteNotFound:
            self._gone_already(memory)
            return
        except Exception as err:
            self.navi.report(err, "Forgetting")
            return
        self.forget_locally(report.get("forgotten") or [memory["id"]])
        self.notify(done)
        if report.get("scrub_pending"):
            self.notify(
                escape(
                    f"An old copy of it is still on disk: {report['scrub_pending']}. Navi"
                    " removes it as soon as it can."
                ),
                title="Forgetting",
                severity="warning",
                timeout=15,
            )

    @work(exclusive=True, group="inspector-action", exit_on_error=False)
    async def action_edit(self) -> None:
        memory = self.current
        if memory is None:
            return
        edited = await self._edit(memory, "Edit memory")
        if edited is not None:
            self.replace_locally(edited)
            self.notify("Saved")

    async def _edit(self, memory: Memory, title: str) -> Memory | None:
        """Ask for a new value and save it; the memory as saved, or None. A value the daemon
        refuses (too long, say) is shown again with the reason, never thrown away."""

        async def save(value: str) -> Memory | None:
            if value == memory["value"]:
                return memory
            check_memory_fields(value=value)  # in words: the daemon's line names a parameter
            try:
                return await self.navi.link.memory("edit", memory["id"], value=value)
            except RemoteNotFound:
                self._gone_already(memory, "saved")
                return None

        return await ask_text(self.app, title, memory["value"], save)

    @work(exclusive=True, group="inspector-action", exit_on_error=False)
    async def action_pin(self) -> None:
        memory = self.current
        if memory is None:
            return
        pinned = not memory.get("pinned")
        try:
            updated = await self.navi.link.memory("pin", memory["id"], pinned)
        except RemoteNotFound:
            self._gone_already(memory, "pinned" if pinned else "unpinned")
            return
        except Exception as err:
            self.navi.report(err, "Pinning")
            return
        self.replace_locally(updated)
        self.notify("Pinned: it never fades" if pinned else "Unpinned")

    @work(exclusive=True, group="inspector-action", exit_on_error=False)
    async def action_confirm(self) -> None:
        memory = self.current
        if memory is None:
            return
        try:
            updated = await self.navi.link.memory("confirm", memory["id"])
        except RemoteNotFound:
            self._gone_already(memory, "confirmed")
            return
        except Exception as err:
            self.navi.report(err, "Confirming")
            return
        self.replace_locally(updated)
        self.notify("Confirmed as still true: pinned, and fully trusted")

    @work(exclusive=True, group="inspector-action", exit_on_error=False)
    async def action_expires(self) -> None:
        """Ask when the fact stops being true (7d, 2w, a date, or never) and save it."""
        memory = self.current
        if memory is None:
            return
        current = memory.get("expires_at")
        now = f"now {describe_expiry(current)}" if current else "now never"

        async def save(answer: str) -> tuple[str | None, Memory] | None:
            expires = parse_expires(answer, "the expiry")
            try:
                return expires, await self.navi.link.memory(
                    "edit", memory["id"], expires_at=expires
                )
            except RemoteNotFound:
                self._gone_already(memory, "saved")
                return None

        saved = await ask_text(
            self.app,
            f"When does it stop being true? ({now})",
            save=save,
            placeholder="7d, 2w, 2025-06-30, or never",
            check=_expiry_problem,
        )
        if saved is None:
            return
        expires, updated = saved
        self.replace_locally(updated)
        self.notify(f"Expires {describe_expiry(expires)}" if expires else "It never expires now")

    @work(exclusive=True, group="inspector-action", exit_on_error=False)
    async def action_accept(self) -> None:
        memory = self.current
        if memory is not None:
            await self._accept(memory)

    @work(exclusive=True, group="inspector-action", exit_on_error=False)
    async def action_edit_accept(self) -> None:
        memory = self.current
        if memory is None:
            return
        edited = await self._edit(memory, "Edit, then accept")
        if edited is not None:
            await self._accept(edited)

    async def _accept(self, memory: Memory) -> None:
        try:
            await self.navi.link.memory("accept", memory["id"])
        except RemoteNotFound:
            self._gone_already(memory, "accepted")
            return
        except Exception as err:
            self.navi.report(err, "Accepting")
            return
        self.forget_locally([memory["id"]])  # it leaves the inbox; the reload files it
        self.notify("Accepted")

    async def action_open_session(self) -> None:
        memory = self.current
        session_id = memory.get("session_id") if memory else None
        if not session_id:
            return
        await self.app.switch_mode("chat")
        await self.app.screen.run_action(f"open_session({session_id!r})")

    @work(exclusive=True, group="inspector-export", exit_on_error=False)
    async def action_export(self) -> None:
        async def markdown() -> str:
            return str(await self.navi.link.memory("export_markdown"))

        name = export_name(self.navi.status.profile or "default")
        try:
            path = await export_to(self.app, "the whole memory", name, markdown)
        except Exception as err:
            self.navi.report(err, "Exporting memory")
            return
        if path is not None:
            self.notify(f"Memory exported to {safe(str(path))}", title="Export", timeout=10)


def _expiry_problem(text: str) -> str | None:
    """What is wrong with a typed expiry (shown in the dialog), or None."""
    try:
        parse_expires(text, "the expiry")
    except InvalidInput as err:
        return str(err)
    return None
