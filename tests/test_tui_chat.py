"""The chat as a user drives it: the real app through Pilot, a real daemon on a real socket,
and the fake Ollama on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest

from navi_desktop.daemon.client import RemoteNotFound, RpcCallError
from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.chat.messages import MessageView
from navi_desktop.tui.chat.prompt import Prompt
from navi_desktop.tui.chat.used import UsedScreen
from navi_desktop.tui.dialogs import ChoiceScreen, TextScreen
from navi_desktop.tui.widgets.status_line import Banner, StatusLine
from tests.fake_ollama import Reply
from tests.tui_support import SIZE, Daemon, banner, make_home, until


def views(app: NaviApp) -> list[MessageView]:
    return list(app.screen.query(MessageView))


def replies(app: NaviApp) -> list[str]:
    return [v.text for v in views(app) if v.role == "assistant"]


async def ready(app: NaviApp, pilot) -> None:
    await until(pilot, lambda: app.status.memories is not None)


async def say(app: NaviApp, pilot, text: str) -> None:
    before = len(views(app))
    await pilot.press(*text, "enter")
    await until(pilot, lambda: len(views(app)) >= before + 2 and app.screen.reply is None)


@contextlib.asynccontextmanager
async def chat_app(fake, daemon, *scripted: Reply, **kw: Any) -> AsyncIterator[tuple[NaviApp, Any]]:
    """The app on the chat, ready (the daemon's figures in), the fake scripted."""
    fake.script(*scripted)
    app = NaviApp(daemon.paths, autostart=False, **kw)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        yield app, pilot


async def tea_chat(app: NaviApp, pilot) -> str:
    """Once the app is ready, a first message about tea and its reply: the session's id."""
    await ready(app, pilot)
    await say(app, pilot, "tell me about tea")
    return app.screen.session_id


async def test_a_reply_streams_into_the_transcript_and_is_stored(fake, daemon):
    fake.script(Reply("Hello **there**.\n\n```python\nprint(1)\n"))  # an unclosed fence
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await say(app, pilot, "hi navi")
        assert [v.role for v in views(app)] == ["user", "assistant"]
        assert replies(app) == ["Hello **there**.\n\n```python\nprint(1)\n"]
        session_id = app.screen.session_id
        assert session_id is not None
        await until(pilot, lambda: app.screen.sessions.title_of(session_id) == "hi navi")
    shown = await daemon.call("sessions.show", {"id": session_id})
    assert [(m["role"], m["content"]) for m in shown["messages"]] == [
        ("user", "hi navi"),
        ("assistant", "Hello **there**.\n\n```python\nprint(1)\n"),
    ]


async def test_ctrl_j_adds_a_newline_and_enter_sends_both_lines(fake, daemon):
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("a", "ctrl+j", "b")
        assert app.screen.query_one("#prompt").text == "a\nb"
        await pilot.press("enter")
        await until(pilot, lambda: len(replies(app)) == 1 and app.screen.reply is None)
    assert fake.bodies()[-1]["messages"][-1]["content"] == "a\nb"


async def test_escape_stops_a_reply_and_keeps_what_came(fake, daemon):
    fake.script(Reply(chunks=["Counting: ", "one, ", "two"], hang=True))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press(*"count", "enter")
        await until(pilot, lambda: app.screen.reply is not None and "two" in app.screen.reply.text)
        await pilot.press("escape")
        await until(pilot, lambda: app.screen.reply is None)
        assert replies(app) == ["Counting: one, two"]
        assert "(stopped)" in str(views(app)[-1].query_one(".note").render())
        await fake.wait_for_disconnect()


async def test_a_second_enter_before_the_reply_starts_loses_neither_message(fake, daemon):
    """Two messages sent in one burst, the second before the first's reply exists (as fast
    typing in a terminal does): the first is sent and answered, the second comes back to the
    prompt, before what was typed since. Before, the second's turn cancelled the first's
    before it reached the daemon, and the first message was gone."""
    fake.script(Reply(chunks=["One ", "reply."]))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        prompt = app.screen.query_one("#prompt", Prompt)
        prompt.text = "typed since"
        prompt.post_message(Prompt.Submitted("first message"))
        prompt.post_message(Prompt.Submitted("second message"))
        await until(pilot, lambda: len(replies(app)) == 1 and not app.screen.answering)
        assert [v.text for v in views(app) if v.role == "user"] == ["first message"]
        assert prompt.text == "second message\ntyped since"
        await pilot.press("enter")  # now it goes
        await until(pilot, lambda: len(replies(app)) == 2 and not app.screen.answering)
        session_id = app.screen.session_id
    shown = await daemon.call("sessions.show", {"id": session_id})
    assert [m["content"] for m in shown["messages"] if m["role"] == "user"] == [
        "first message",
        "second message\ntyped since",
    ]


async def test_a_message_sent_while_navi_answers_comes_back_to_the_prompt(fake, daemon):
    fake.script(Reply(chunks=["Counting: ", "one"], hang=True))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press(*"count", "enter")
        await until(pilot, lambda: app.screen.reply is not None and "one" in app.screen.reply.text)
        await pilot.press(*"and then", "enter")
        prompt = app.screen.query_one("#prompt", Prompt)
        await until(pilot, lambda: prompt.text == "and then")
        await pilot.press(*" more")  # the cursor is after the words given back
        assert prompt.text == "and then more"
        await pilot.press("escape")
        await until(pilot, lambda: not app.screen.answering)
        assert [v.text for v in views(app) if v.role == "user"] == ["count"]
        await fake.wait_for_disconnect()


async def test_regenerate_replaces_the_last_reply(fake, daemon):
    fake.script(Reply("First answer."), Reply("Second answer."))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await say(app, pilot, "question")
        await pilot.press("ctrl+r")
        await until(pilot, lambda: replies(app) == ["Second answer."] and not app.screen.reply)
        session_id = app.screen.session_id
    shown = await daemon.call("sessions.show", {"id": session_id})
    assert [m["content"] for m in shown["messages"]] == ["question", "Second answer."]


async def test_copy_puts_the_reply_on_the_clipboard(fake, daemon):
    fake.script(Reply("Copy me."))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await say(app, pilot, "hello")
        await pilot.press("f6")
        assert app.clipboard == "Copy me."
        views(app)[0].focus()
        await pilot.press("c")
        assert app.clipboard == "hello"


async def open_used(fake, daemon, app: NaviApp, pilot) -> tuple[int, UsedScreen]:
    """A memory, a reply that used it, and "What did you use?" (F5) open on that reply."""
    added = await daemon.call(
        "memory.add",
        {"args": ["green"], "kwargs": {"category": "preferences", "key": "favourite colour"}},
    )
    fake.script(Reply("Your favourite colour is green."))
    await ready(app, pilot)
    await say(app, pilot, "what is my favourite colour?")
    await pilot.press("f5")
    await until(pilot, lambda: isinstance(app.screen, UsedScreen) and app.screen.injections)
    assert isinstance(app.screen, UsedScreen)
    return added["memory"]["id"], app.screen


async def test_what_did_you_use_lists_the_memory_and_can_pin_and_forget_it(fake, daemon):
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        memory_id, used = await open_used(fake, daemon, app, pilot)
        assert [i["memory_id"] for i in used.injections] == [memory_id]
        assert "favourite colour: green" in str(
            used.query_one("#used-list").get_option_at_index(0).prompt
        )
        await pilot.press("p")
        await until(pilot, lambda: used.injections and used.injections[0]["memory"]["pinned"])
        assert (await daemon.call("memory.get", {"args": [memory_id]}))["pinned"] is True
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        await pilot.click("#choice-yes")
        await until(pilot, lambda: app.screen is used and not used.injections)
    with pytest.raises(RemoteNotFound):
        await daemon.call("memory.get", {"args": [memory_id]})


async def test_the_reply_counts_as_done_only_once_its_view_knows_its_turn(
    fake, daemon, monkeypatch
):
    # A slow finish (a long reply's last render on a busy machine) must not leave a moment in
    # which the reply looks done but F5 answers "Nothing was recorded for this message".
    slow_finish = MessageView.finish

    async def finish(self, *args, **kwargs):
        await asyncio.sleep(0.3)
        await slow_finish(self, *args, **kwargs)

    monkeypatch.setattr(MessageView, "finish", finish)
    fake.script(Reply("Noted."))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await say(app, pilot, "hello")
        assert replies(app) == ["Noted."]
        assert views(app)[-1].user_message_id is not None
        await pilot.press("f5")
        await until(pilot, lambda: isinstance(app.screen, UsedScreen))


async def test_forgetting_redacts_the_open_transcript_and_the_sessions_list(fake, daemon):
    fake.script(Reply("Teal it is."))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        await ready(app, pilot)
        await say(app, pilot, "my favourite colour is teal")
        await until(pilot, lambda: chat.sessions.title_of(chat.session_id) is not None)
        added = await daemon.call(
            "memory.add",
            {
                "args": ["teal"],
                "kwargs": {
                    "key": "favourite colour",
                    "evidence": "my favourite colour is teal",
                    "session_id": chat.session_id,
                    "source": "conversation",
                },
            },
        )
        await daemon.call("memory.forget", {"args": [added["memory"]["id"]]})  # another client
        await until(pilot, lambda: views(app)[0].text == "[forgotten]")
        await until(pilot, lambda: chat.sessions.title_of(chat.session_id) == "[forgotten]")


async def test_sessions_can_be_searched_opened_renamed_exported_and_deleted(
    fake, daemon, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    fake.script(Reply("Tea is good."), Reply("Rust is fast."))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        tea = await tea_chat(app, pilot)
        await pilot.press("ctrl+n")
        await until(pilot, lambda: chat.session_id is None and not views(app))
        await say(app, pilot, "tell me about rust")
        await until(pilot, lambda: len(chat.sessions.sessions) == 2)

        await pilot.press("ctrl+f", *"tea")
        options = chat.query_one("#sessions")
        await until(pilot, lambda: options.option_count == 1)
        assert options.get_option_at_index(0).id == tea
        options.focus()
        await pilot.press("enter")
        await until(pilot, lambda: chat.session_id == tea and len(views(app)) == 2)
        assert replies(app) == ["Tea is good."]

        await pilot.press("f7")
        await until(pilot, lambda: isinstance(app.screen, TextScreen))
        app.screen.query_one("#text").value = "Tea notes"
        await pilot.press("enter")
        await until(pilot, lambda: chat.sessions.title_of(tea) == "Tea notes")

        await pilot.press("f9")
        await until(pilot, lambda: isinstance(app.screen, TextScreen))
        offered = app.screen.query_one("#text").value
        assert offered.endswith("navi-session-tea-notes.md")
        exported = tmp_path / "navi-session-tea-notes.md"
        app.screen.query_one("#text").value = str(exported)
        await pilot.press("enter")
        await until(pilot, exported.exists)
        assert "Tea is good." in exported.read_text()

        await pilot.press("f8")
        await until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        await pilot.click("#choice-yes")
        await until(pilot, lambda: chat.session_id is None and len(chat.sessions.sessions) == 1)
    with pytest.raises(RemoteNotFound):
        await daemon.call("sessions.show", {"id": tea})


async def test_incognito_is_unmistakable_and_leaves_nothing_behind(fake, daemon):
    fake.script(Reply("Off the record."))
    before = await daemon.call("memory.stats")
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        await ready(app, pilot)
        await pilot.press("ctrl+o")
        await until(pilot, lambda: app.status.incognito)
        assert chat.has_class("-incognito")
        assert "INCOGNITO" in str(chat.query_one("#chat-title").render())
        assert "INCOGNITO" in str(chat.query_one(StatusLine).render())
        await say(app, pilot, "a secret")
        assert chat.session_id.startswith("incognito-")
        await pilot.press("ctrl+o")
        await until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        await pilot.click("#choice-discard")
        await until(pilot, lambda: not app.status.incognito and not views(app))
    after = await daemon.call("memory.stats")
    assert (after["sessions"], after["messages"]) == (before["sessions"], before["messages"])


async def test_incognito_on_a_new_profile_creates_no_file_for_it(fake, tmp_path):
    # The app's looks at the profile (its count, the sessions, the inspector) opened it, and
    # opening creates the file: an empty memory was left under the name typed.
    fake.script(Reply("Off the record."))
    daemon = await Daemon(make_home(tmp_path, fake.url)).start()
    folder = daemon.paths.profile_db("brand-new").parent
    try:
        app = NaviApp(daemon.paths, profile="brand-new", incognito=True, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            assert app.status.incognito and app.status.memories == 0
            await say(app, pilot, "a secret")
            await pilot.press("f3")
            await until(pilot, lambda: app.screen.__class__.__name__ == "InspectorScreen")
            await pilot.press("f2")
        assert not folder.exists()
        shutil.rmtree(daemon.paths.runtime / "empty-profile")  # a cleaner of the run folder
        stats = await daemon.call("memory.stats", {"profile": "brand-new"})
        assert stats["memories"] == {} and stats["path"] == str(folder / "memory.db")
        await daemon.call("memory.add", {"profile": "brand-new", "args": ["I like tea"]})
        assert (folder / "memory.db").exists()  # the first write makes the profile
        listed = await daemon.call("memory.list", {"profile": "brand-new"})
        assert [m["value"] for m in listed["memories"]] == ["I like tea"]
    finally:
        await daemon.stop()
    assert not (daemon.paths.runtime / "empty-profile").exists()


async def test_leaving_incognito_can_keep_the_chat_as_a_session(fake, daemon):
    fake.script(Reply("Worth keeping."))
    app = NaviApp(daemon.paths, autostart=False, incognito=True)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        await ready(app, pilot)
        assert app.status.incognito  # `navi --incognito`
        await say(app, pilot, "keep this one")
        await pilot.press("ctrl+o")
        await until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        await pilot.click("#choice-keep")
        await until(pilot, lambda: not app.status.incognito and chat.session_id)
        kept = chat.session_id
        assert not kept.startswith("incognito-")
    shown = await daemon.call("sessions.show", {"id": kept})
    assert [m["content"] for m in shown["messages"]] == ["keep this one", "Worth keeping."]


async def test_ollama_down_shows_a_banner_and_the_inspector_still_opens(tmp_path):
    dead = "http://127.0.0.1:9"  # nothing listens on the discard port
    d = await Daemon(make_home(tmp_path, dead)).start()
    try:
        app = NaviApp(d.paths, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.status.ollama_reachable is False)
            await until(pilot, lambda: "Ollama is not reachable" in banner(app))
            assert app.screen.query_one(Banner).display
            text = banner(app)
            assert dead in text and "ollama serve" in text
            await pilot.press(*"hello", "enter")
            await until(pilot, lambda: len(views(app)) == 2 and app.screen.reply is None)
            assert "⚠" in str(views(app)[-1].query_one(".note").render())
            await pilot.press("f3")
            await until(pilot, lambda: app.current_mode == "memory")
            assert app.screen.query_one(Banner).display
    finally:
        await d.stop()


async def test_a_missing_model_is_named_with_the_command_that_fixes_it(fake, tmp_path):
    paths = make_home(tmp_path, fake.url)
    config = paths.config_file
    config.write_text(config.read_text().replace('"llama3.2"', '"mistral"'))
    d = await Daemon(paths).start()
    try:
        app = NaviApp(paths, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.status.missing_models == ("mistral",))
            await until(pilot, lambda: "ollama pull mistral" in banner(app))
    finally:
        await d.stop()


async def test_no_daemon_the_app_still_opens_and_says_why(tmp_path):
    app = NaviApp(make_home(tmp_path, "http://127.0.0.1:9"), autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.status.daemon == "down")
        await until(pilot, lambda: "daemon is not answering" in banner(app))
        await pilot.press(*"hello", "enter")
        await pilot.pause(0.2)
        await until(pilot, lambda: app.screen.query_one("#prompt").text == "hello")
        assert not views(app)  # not sent, and the words are back in the prompt
        await pilot.press("f4")
        await until(pilot, lambda: app.current_mode == "settings")


async def test_keys_are_rebindable_by_id_and_shown_in_the_footer_and_palette(fake, tmp_path):
    from textual.widgets._footer import FooterKey

    paths = make_home(tmp_path, fake.url, '[ui.keymap]\n"navi.chat.new" = "ctrl+g"\n')
    d = await Daemon(paths).start()
    fake.script(Reply("One."))
    try:
        app = NaviApp(paths, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            chat = app.screen
            await ready(app, pilot)

            def keys() -> dict[str, str]:
                return {k.description: k.key for k in chat.query(FooterKey) if k.description}

            await until(pilot, lambda: "New session" in keys())
            assert keys()["New session"] == "ctrl+g"  # the keymap's key
            assert "What did you use?" not in keys()  # hidden: no reply yet
            # The footer is rebuilt only when the keys it shows change.
            first = chat.query(FooterKey).first()
            chat.refresh_bindings()  # as every focus change does
            await pilot.pause(0.1)
            assert chat.query(FooterKey).first() is first
            await pilot.press("ctrl+f")  # the search field has no Send key
            await until(pilot, lambda: "Send" not in keys())
            chat.query_one("#prompt").focus()
            await until(pilot, lambda: "Send" in keys())

            await say(app, pilot, "hello")
            await until(pilot, lambda: "What did you use?" in keys())  # a reply to explain
            commands = {c.title for c in app.get_system_commands(chat)}
            assert {"New session", "Regenerate", "Incognito", "Memory", "Settings"} <= commands
            await pilot.press("ctrl+g")
            await until(pilot, lambda: chat.session_id is None and not views(app))
    finally:
        await d.stop()


def test_a_session_report_counts_what_was_learned_and_what_waits():
    from navi_desktop.tui.chat.notices import learned_text

    assert learned_text({}) == "0 memories learned"
    assert learned_text({"added": [1], "strengthened": []}) == "1 memory learned"
    assert (
        learned_text({"added": [1, 2], "superseded": [3], "held": [4]})
        == "3 memories learned, 1 to review in Memory → Inbox"
    )


async def test_a_message_the_daemon_could_not_store_comes_back_to_the_prompt(fake, tmp_path):
    """On a full disk the message was shown as sent, under "(no reply)", and lost; Ctrl+R
    then answered the turn before it under it. Now it is back in the prompt, unsent."""
    from tests.test_disk_full import fill, small_disk

    with small_disk(tmp_path / "disk", "10m") as disk:
        paths = make_home(disk, fake.url)
        d = await Daemon(paths).start()
        try:
            app = NaviApp(paths, autostart=False)
            async with app.run_test(size=SIZE) as pilot:
                await until(pilot, lambda: app.status.memories is not None)
                fake.script(Reply("Hello there."))
                await pilot.press(*"hello", "enter")
                await until(pilot, lambda: app.screen.reply is None and len(views(app)) == 2)
                filler = fill(disk)
                prompt = app.screen.query_one("#prompt")
                for text in ("on a full disk", "hello"):  # "hello" again: stored once only
                    await pilot.press(*text, "enter")
                    await until(pilot, lambda text=text: prompt.text == text)
                    assert [v.text for v in views(app)] == ["hello", "Hello there."]
                    prompt.text = ""
                filler.unlink()
                fake.script(Reply("Hello again."))
                await pilot.press("ctrl+r")  # the last stored turn, under its own message
                again = ["hello", "Hello again."]
                await until(pilot, lambda: [v.text for v in views(app)] == again)
        finally:
            await d.stop()


async def test_a_message_left_without_a_reply_can_be_answered_again(fake, daemon):
    """A message whose reply never came (the daemon killed mid-reply, a model error) could
    not be answered again: Ctrl+R wants a reply to replace."""
    session = (await daemon.call("sessions.create", {}))["id"]
    fake.script(Reply(status=500, error="model crashed"))
    with pytest.raises(RpcCallError, match="model crashed"):
        await daemon.call("chat.send", {"text": "are you there?", "session_id": session})
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.status.memories is not None)
        await app.screen.action_open_session(session)
        await until(pilot, lambda: [v.text for v in views(app)] == ["are you there?"])
        fake.script(Reply("Here now."))
        await pilot.press("ctrl+r")
        await until(pilot, lambda: [v.text for v in views(app)] == ["are you there?", "Here now."])
    shown = await daemon.call("sessions.show", {"id": session})
    assert [m["content"] for m in shown["messages"]] == ["are you there?", "Here now."]


async def test_a_message_the_daemon_refuses_to_take_comes_back_to_the_prompt(fake, daemon):
    """A message the daemon refuses before its turn (over the length limit) was kept on
    screen as "may not have been saved", its words no longer in the prompt to shorten: the
    app and `navi chat` now read a refusal alike, as a message not kept."""
    from navi_desktop.limits import MAX_CHAT_TEXT

    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        prompt = app.screen.query_one("#prompt")
        long_text = "word " * (MAX_CHAT_TEXT // 5) + "!"
        prompt.text = long_text
        await pilot.press("end", "enter")
        await until(pilot, lambda: prompt.text == long_text and app.screen.reply is None)
        assert views(app) == []
        [said] = [n.message for n in app._notifications if n.severity == "error"]
        assert "back in the prompt" in said and "100,000" in said
    for session in await daemon.call("sessions.list", {}):
        assert (await daemon.call("sessions.show", {"id": session["id"]}))["messages"] == []
