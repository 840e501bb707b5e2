"""One chat turn: context, the model's streamed reply (with memory tools when the model has
them), and what gets stored. Incognito turns store nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from navi_desktop.daemon.wire import telling
from navi_desktop.llm.budget import MAX_CHARS_PER_TOKEN
from navi_desktop.llm.tool_loop import chat_with_tools
from navi_desktop.llm.types import (
    ContentDelta,
    Done,
    ThinkingDelta,
    ToolCallsRequested,
    ToolResult,
)
from navi_desktop.pipeline.context import ContextSettings, build_context
from navi_desktop.pipeline.tools import TOOLS, MemoryTools

if TYPE_CHECKING:
    from navi_desktop.llm.backend import OllamaBackend
    from navi_desktop.memory.models import Message
    from navi_desktop.memory.store import MemoryStore
    from navi_desktop.pipeline.incognito import IncognitoSession

Emit = Callable[[str, dict[str, Any]], Awaitable[object]]  # e.g. Peer.notify
HISTORY_MESSAGES = 40  # earlier turns sent with each prompt; the rest reach it as memory


@dataclass
class TurnResult:
    session_id: str
    reply: str
    user_message_id: int | None = None
    reply_message_id: int | None = None
    injected: int = 0
    cancelled: bool = False
    memory_changed: list[int] = field(default_factory=list)
    cut: bool = False  # the reply reached the length cap (ollama.reply_max_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "reply": self.reply,
            "user_message_id": self.user_message_id,
            "reply_message_id": self.reply_message_id,
            "injected": self.injected,
            "cancelled": self.cancelled,
            "cut": self.cut,
        }


async def _stream(
    backend: OllamaBackend,
    model: str,
    messages: list[dict[str, Any]],
    tools: MemoryTools | None,
    emit: Emit,
    session_id: str,
    transcript: list[dict[str, Any]],
    parts: list[str],
    reply_tokens: int | None = None,
) -> tuple[str, Done | None, bool]:
    """Stream the reply to ``emit``; returns (reply text, last Done, cancelled). ``parts``
    holds what came of the reply so far: the caller's, for when the stream fails."""
    done: Done | None = None
    # A cap on the reply, and a context that holds the prompt (else the server cuts it).
    messages, options = await backend.chat_request(model, messages, reply_tokens)
    # A server that ignores num_predict (not every Ollama-compatible one keeps it) would
    # stream without end: past what the cap allows, the reply is cut here as Ollama cuts it.
    cap = options.get("num_predict")
    room = cap * MAX_CHARS_PER_TOKEN if cap else None
    if tools is not None:
        events = chat_with_tools(
            backend.chat_stream, model, messages, TOOLS, tools.call, options=options
        )
    else:
        events = backend.chat_stream(model, messages, options=options)
    try:
        async with aclosing(events) as stream:
            async for event in stream:
                if isinstance(event, ContentDelta | ThinkingDelta) and room is not None:
                    room -= len(event.text)
                    if room < 0:  # what fits of this delta is kept: one delta may be all of it
                        if isinstance(event, ContentDelta) and (fits := event.text[:room]):
                            parts.append(fits)
                            await emit("chat.delta", {"session_id": session_id, "text": fits})
                        done = Done(model, done_reason="length")
                        break
                if isinstance(event, ContentDelta):
                    parts.append(event.text)
                    await emit("chat.delta", {"session_id": session_id, "text": event.text})
                elif isinstance(event, ToolCallsRequested):
                    calls = [{"name": c.name, "arguments": c.arguments} for c in event.calls]
                    transcript.append(
                        {
                            "role": "assistant",
                            "content": "".join(parts),
                            "meta": {"tool_calls": calls},
                        }
                    )
                    parts.clear()
                    await emit("chat.tool", {"session_id": session_id, "calls": calls})
                elif isinstance(event, ToolResult):
                    step: dict[str, Any] = {
                        "role": "tool",
                        "name": event.call.name,
                        "content": event.content,
                    }
                    if tools is not None and (note := tools.take_note()):
                        step["meta"] = note  # e.g. a refused forget, kept in the session
                    transcript.append(step)
                elif isinstance(event, Done) and event.final:
                    done = event
    except asyncio.CancelledError:
        # A cancelled reply (Esc, chat.cancel) ends here; the turn still stores what came.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return "".join(parts), done, True
    return "".join(parts), done, False


async def run_turn(
    *,
    store: MemoryStore,
    backend: OllamaBackend,
    model: str,
    session_id: str,
    text: str,
    emit: Emit,
    context: ContextSettings,
    use_tools: bool,
    reuse_user: Message | None = None,
    reply_tokens: int | None = None,
) -> TurnResult:
    """A turn in a normal session. The user's message is stored before anything can fail:
    an acknowledged message is never lost. ``reuse_user``: answer this stored message again
    (regenerate; its old reply already dropped) instead of saving ``text``."""
    # Tool calls and results sit between turns: read enough to find HISTORY_MESSAGES turns.
    if reuse_user is None:
        earlier = await store.messages(session_id, last=2 * HISTORY_MESSAGES)
        user = await store.save_message(session_id, "user", text)
    else:
        earlier = [
            m
            for m in await store.messages(session_id, last=2 * HISTORY_MESSAGES + 1)
            if m.id < reuse_user.id
        ]
        user = reuse_user
    # Stored from here on: a failure says so, and the client keeps the message it showed
    # rather than give it back to be sent (and stored) twice.
    with telling(stored=True, user_message_id=user.id, session_id=session_id):
        return await _answer(
            store=store,
            backend=backend,
            model=model,
            session_id=session_id,
            text=text,
            user=user,
            earlier=earlier,
            emit=emit,
            context=context,
            tools=MemoryTools(store, session_id) if use_tools else None,
            reply_tokens=reply_tokens,
        )


async def _answer(
    *,
    store: MemoryStore,
    backend: OllamaBackend,
    model: str,
    session_id: str,
    text: str,
    user: Message,
    earlier: list[Message],
    emit: Emit,
    context: ContextSettings,
    tools: MemoryTools | None,
    reply_tokens: int | None,
) -> TurnResult:
    """The reply to ``user`` (``text``, stored), streamed and stored after it."""
    history = [
        {"role": m.role, "content": m.content}
        for m in earlier
        if m.role in ("user", "assistant") and m.content
    ][-HISTORY_MESSAGES:]
    ctx = await build_context(
        store,
        user_text=text,
        history=history,
        session_id=session_id,
        first_turn=not earlier,
        settings=context,
    )
    await store.record_injections(session_id, user.id, ctx.injections)
    steps: list[dict[str, Any]] = []
    parts: list[str] = []
    failed: Exception | None = None
    try:
        reply, done, cancelled = await _stream(
            backend, model, ctx.messages, tools, emit, session_id, steps, parts, reply_tokens
        )
    except Exception as exc:  # the server failed mid-reply: a dropped connection, a stall
        failed, reply, done, cancelled = exc, "".join(parts), None, False
    finally:
        # Tool calls and results belong in the transcript (extraction reads them), even when
        # the reply failed or was cancelled. Saved after the reply: what a forget took
        # meanwhile (the user's, or the model's own memory_forget) is redacted from them as
        # the forget's scrub would have.
        for step in steps:
            await store.save_message(
                session_id,
                step["role"],
                step["content"],
                name=step.get("name"),
                meta=step.get("meta"),
                said_at=user.created_at,
            )
    if failed is not None:  # what the user saw of it is kept, as a stopped reply's is
        if reply.strip():
            meta = {"model": model, "failed": True}
            await store.save_message(
                session_id, "assistant", reply, meta=meta, said_at=user.created_at
            )
        raise failed
    meta: dict[str, Any] = {"model": model}
    if done is not None:
        meta |= {"prompt_tokens": done.prompt_eval_count, "reply_tokens": done.eval_count}
    if cancelled:
        meta["cancelled"] = True
    cut = _was_cut(done)
    if cut:
        meta["cut"] = True
    saved = None
    if reply or not cancelled:
        saved = await store.save_message(
            session_id, "assistant", reply, meta=meta, said_at=user.created_at
        )
    return TurnResult(
        session_id,
        reply,
        user.id,
        saved.id if saved else None,
        len(ctx.injections),
        cancelled,
        tools.changed if tools else [],
        cut,
    )


def _was_cut(done: Done | None) -> bool:
    """The reply stopped at the length cap rather than where the model ended it."""
    return done is not None and done.done_reason == "length"


async def run_incognito_turn(
    *,
    session: IncognitoSession,
    store: MemoryStore | None,
    backend: OllamaBackend,
    model: str,
    text: str,
    emit: Emit,
    context: ContextSettings,
    reply_tokens: int | None = None,
) -> TurnResult:
    """A turn that touches no file: the transcript lives in ``session`` only; memory is read
    (never written) only when the session allows it. No memory tools: they would write."""
    ctx = await session.context(store, text, context)
    # Kept before the reply, as a stored session saves it first: a failed reply leaves it
    # to be answered again (Ctrl+R), and the failure says it is kept.
    session.add_user(text)
    parts: list[str] = []
    with telling(stored=True, session_id=session.id):
        try:
            reply, done, cancelled = await _stream(
                backend, model, ctx.messages, None, emit, session.id, [], parts, reply_tokens
            )
        except Exception:  # what came is kept in the session's memory, as in a stored session
            if "".join(parts).strip():
                session.add_reply("".join(parts))
            raise
    session.add_reply(reply)
    return TurnResult(
        session.id, reply, None, None, len(ctx.injections), cancelled, cut=_was_cut(done)
    )
