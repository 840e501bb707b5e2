"""The sessions list's search says why the list is empty: a search the daemon would refuse
(past 10,000 characters) is said in the list, as in the memory inspector, and so is a search
nothing matches. Before, both left an empty list and said nothing."""

from __future__ import annotations

from textual.widgets import Input, OptionList

from tests.fake_ollama import Reply
from tests.test_tui_chat import chat_app, tea_chat
from tests.tui_support import until


def listed(options: OptionList) -> list[str]:
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


async def test_an_empty_search_result_says_why(fake, daemon) -> None:
    async with chat_app(fake, daemon, Reply("Tea is good.")) as (app, pilot):
        chat = app.screen
        tea = await tea_chat(app, pilot)
        await until(pilot, lambda: chat.sessions.sessions)
        search = chat.query_one("#session-search", Input)
        options = chat.query_one("#sessions", OptionList)
        search.value = "x" * 10_001
        too_long = "A search is at most 10,000 characters, and this one has 10,001"
        await until(pilot, lambda: [row[: len(too_long)] for row in listed(options)] == [too_long])
        search.value = "zebra"
        await until(pilot, lambda: listed(options) == ["No session matches this search."])
        assert options.get_option_at_index(0).disabled
        search.value = "tea"
        await until(
            pilot, lambda: options.option_count == 1 and options.get_option_at_index(0).id == tea
        )
