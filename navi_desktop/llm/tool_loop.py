"""The tool loop: stream a reply; while the model asks for tools, run them, send the results
back and stream the next reply. Independent of the HTTP client: it drives any ``chat_stream``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from navi_desktop.llm.errors import ToolLoopLimit, one_line
from navi_desktop.llm.types import ChatEvent, Done, ToolCall, ToolResult

ChatMessage = Mapping[str, Any]
ToolSpec = Mapping[str, Any] | Callable[..., Any]
CallTool = Callable[[str, dict[str, Any]], Awaitable[Any]]
ChatStream = Callable[..., AsyncIterator[ChatEvent]]


async def chat_with_tools(
    chat_stream: ChatStream,
    model: str,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec],
    call_tool: CallTool,
    *,
    max_rounds: int = 5,
    think: bool | str | None = None,
    options: Mapping[str, Any] | None = None,
) -> AsyncIterator[ChatEvent]:
    """Run ``call_tool(name, args)`` for each call the model makes, until it answers.

    Yields every round's events, a :class:`ToolResult` per call, and every round's
    :class:`Done` (``final=False`` for rounds that ended in tool calls). A tool that raises
    is reported to the model as ``error: ...`` so it can recover. A model still calling
    tools in round ``max_rounds`` raises :class:`ToolLoopLimit`; a model without tool
    support raises :class:`ToolsUnsupported` before anything is yielded.
    """
    history = list(messages)
    for round_no in range(1, max_rounds + 1):
        done: Done | None = None
        stream = chat_stream(model, history, tools=tools, think=think, options=options)
        async with aclosing(stream) as events:
            async for event in events:
                if isinstance(event, Done):
                    done = event
                else:
                    yield event
        assert done is not None  # chat_stream raises rather than end without one
        if not done.tool_calls:
            yield done
            return
        yield replace(done, final=False)
        if round_no == max_rounds:
            break
        assistant: dict[str, Any] = {
            "role": "assistant",
            "content": done.content,
            "tool_calls": [
                {"function": {"name": c.name, "arguments": c.arguments}} for c in done.tool_calls
            ],
        }
        if done.thinking:
            assistant["thinking"] = done.thinking
        history.append(assistant)
        for call in done.tool_calls:
            result = await run_tool(call_tool, call)
            yield result
            history.append({"role": "tool", "tool_name": call.name, "content": result.content})
    raise ToolLoopLimit(model, max_rounds)


async def run_tool(call_tool: CallTool, call: ToolCall) -> ToolResult:
    try:
        raw = await call_tool(call.name, dict(call.arguments))
    except Exception as exc:  # the model is told, and can recover or apologise
        return ToolResult(call, f"error: {one_line(str(exc) or type(exc).__name__)}", True)
    content = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)
    return ToolResult(call, content)
