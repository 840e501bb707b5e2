"""Does a session end hold up a chat reply? The daemon's service in-process, a real model.

    python benchmarks/chat_during_extraction.py --host http://127.0.0.1:11500 \
        --model smollm2:135m [--runs 3] [--reply-tokens 64]

On a local Ollama one model serves chat and extraction, one request at a time. For each run:
a stored session of 16 messages (about 1,500 tokens) is ended (``Service.end``, as
``navi end`` does); once its extraction request is in flight, a chat message is sent
(``Service.chat_send``) and the time to the reply's first token and to its end is measured.
Three conditions: the model idle (no session end running), a session end running with
Navi's gate (the request is called off and resumed after the reply), and the same with the
gate switched off (the reply waits behind the extraction request, as before).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from navi_desktop.config import load_settings  # noqa: E402
from navi_desktop.daemon.service import Service  # noqa: E402
from navi_desktop.paths import Paths  # noqa: E402

TALK = [
    ("user", "I'm Tom, I live in York and I work as a nurse at the children's hospital."),
    ("assistant", "Nice to meet you, Tom. Working with children must be rewarding."),
    ("user", "It is. We just had our first baby, a daughter called Ivy, so sleep is rare."),
    ("assistant", "Congratulations! The first months are hard; take help when it's offered."),
    ("user", "My partner Sam works from home as a translator, which helps a lot."),
    ("assistant", "That flexibility is valuable with a newborn."),
    ("user", "I cycle to the hospital every day, it's about twenty minutes along the river."),
    ("assistant", "A good way to clear your head before and after a shift."),
    ("user", "On weekends I bake bread, mostly sourdough, and I grow tomatoes on the balcony."),
    ("assistant", "Sourdough and tomatoes: a classic pairing for a summer lunch."),
    ("user", "Please keep your answers short, I read them on my phone between patients."),
    ("assistant", "Understood, I'll keep it brief."),
    ("user", "I'm learning Spanish for a trip to Seville next spring."),
    ("assistant", "¡Buena suerte! Seville is lovely in spring."),
    ("user", "My favourite band is Radiohead and I play a bit of guitar."),
    ("assistant", "Great taste. Do you play their songs?"),
]


class Peer:
    def __init__(self) -> None:
        self.first: float | None = None

    async def notify(self, method: str, params: dict[str, Any]) -> bool:
        if method == "chat.delta" and self.first is None:
            self.first = time.perf_counter()
        return True


async def service_for(home: Path, args: argparse.Namespace) -> Service:
    paths = Paths.from_env({"NAVI_HOME": str(home)})
    paths.config.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text(
        f'[ollama]\nhost = "{args.host}"\nchat_model = "{args.model}"\n'
        f"reply_max_tokens = {args.reply_tokens}\ntimeout_s = 600\n"
        '[memory]\nembedder = "none"\nprofile = "bench"\n'
    )
    settings, errors = load_settings(paths.config_file)
    assert not errors, errors

    async def broadcast(*_: Any) -> None:
        pass

    return Service(paths, settings, broadcast)


async def one_run(service: Service, chat: str, condition: str, n: int) -> dict[str, Any]:
    """``chat``: the session the chat messages go to (one session: no "new session" ends)."""
    store = await service.store("bench")
    ending = None
    if condition != "idle":
        session = await store.create_session(f"run {n}")
        for role, text in TALK:
            await store.save_message(session.id, role, f"{text} (run {n})")
        ending = asyncio.ensure_future(service.end("bench", session.id, "explicit"))
        while not any(s["chunks"] and not s["waiting"] for s in service.ends.status()):
            await asyncio.sleep(0.05)
        await asyncio.sleep(3.0)  # well into the extraction request
    peer = Peer()
    sent = time.perf_counter()
    params = {"text": f"Give me a name for a cat, please. ({n})", "session_id": chat}
    await service.chat_send(params, peer)
    done = time.perf_counter()
    result = {"first_token_s": (peer.first or done) - sent, "reply_s": done - sent}
    if ending is not None:
        report = await ending
        result["end_s"] = time.perf_counter() - sent
        result["end_status"] = report.status
    return result


async def main_async(args: argparse.Namespace) -> None:
    results: dict[str, list[dict[str, Any]]] = {}
    for condition in ("idle", "gate", "no gate"):
        with tempfile.TemporaryDirectory() as tmp:
            service = await service_for(Path(tmp), args)
            if condition == "no gate":
                service.gate.turn = contextlib.nullcontext  # type: ignore[method-assign]
            try:
                chat = (await (await service.store("bench")).create_session("chat")).id
                await service.chat_send({"text": "Hello", "session_id": chat}, Peer())  # warm up
                runs = []
                for n in range(args.runs):
                    runs.append(await one_run(service, chat, condition, n))
                    print(condition, {k: v for k, v in runs[-1].items()}, flush=True)
                results[condition] = runs
            finally:
                await service.shutdown(budget_s=1)
    print("\n| condition | first token, median (max) | whole reply, median (max) |")
    print("|---|---|---|")
    for condition, runs in results.items():
        first = [r["first_token_s"] for r in runs]
        whole = [r["reply_s"] for r in runs]
        print(
            f"| {condition} | {statistics.median(first):.1f} s ({max(first):.1f} s)"
            f" | {statistics.median(whole):.1f} s ({max(whole):.1f} s) |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reply-tokens", type=int, default=64)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
