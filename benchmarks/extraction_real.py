"""Memory quality and cost with a real model: scripted personas through Navi's own daemon.

    python benchmarks/extraction_real.py --host http://127.0.0.1:11500 --model smollm2:135m \
        [--embedding-model multilingual-e5-small] [--personas benchmarks/data/personas]
        [--only tom,lee] [--reply-tokens 96] [--no-probe] [--json OUT]

Any Ollama-compatible host works (a real Ollama, or ``../shared/tools/ollama_shim.py`` with
a GGUF model). For each persona in ``benchmarks/data/personas/*.json`` (facts stated,
corrected and repeated, sensitive ones, rules, things that must not be stored, two not in
English), in a throw-away ``NAVI_HOME``:

1. ``navi daemon start``; each scripted session is typed with ``navi chat`` (the model
   writes the replies, capped at ``--reply-tokens``), then ended with ``navi end --session``
   (wall time measured; a session left pending is ended again, up to twice: each retry uses
   smaller chunks).
2. A last session asks the probe question (``navi chat``): was an earlier memory holding the
   answer (a fact, a summary or the profile) injected into the prompt (the injection ledger),
   and did the reply contain the answer?
3. ``navi daemon stop``; the profile file is read and scored:
   - found / missed: an expected fact is found when a fact whose value contains one of its
     accepted values is current (active), or held for review;
   - invented: an active fact whose value is not supported by anything the user said
     (its content words are not in the user's messages);
   - must-not violations: a value that must not be kept (a secret, a passing state, a one-off
     request, a corrected value) found in an active fact (scope ``fact`` / ``current``) or
     anywhere in memory, summaries and the profile included (scope ``anywhere``), and a
     sensitive value committed active instead of held;
   - held for review, sessions left pending (after the first end, and after the retries),
     model calls and wall time per session end.

Prints a Markdown table per model and writes the raw results with ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PERSONAS = ROOT / "benchmarks" / "data" / "personas"
RETRIES = 2


def words(text: str) -> list[str]:
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.findall(r"\w+", text)


def contains(haystack: str, needle: str) -> bool:
    return unicodedata.normalize("NFKC", needle).casefold() in (
        unicodedata.normalize("NFKC", haystack).casefold()
    )


def supported(value: str, user_text: str) -> bool:
    """Independent of Navi's own checks: the value is in what the user said, or at least half
    of its longer words (by their first five letters) are."""
    if contains(user_text, value):
        return True
    said = {w[:5] for w in words(user_text)}
    long = [w for w in words(value) if len(w) >= 3]
    return bool(long) and sum(w[:5] in said for w in long) * 2 >= len(long)


class Navi:
    """The ``navi`` command in a throw-away home, pointed at the model server."""

    def __init__(self, home: Path, host: str) -> None:
        self.env = {**os.environ, "NAVI_HOME": str(home), "OLLAMA_HOST": host}
        self.env.pop("NO_COLOR", None)

    def run(self, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "navi_desktop", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )

    def json(self, *args: str) -> Any:
        done = self.run(*args, "--json")
        if done.returncode != 0 and "Traceback" in done.stderr:  # e.g. a checkout mid-edit
            time.sleep(30)
            done = self.run(*args, "--json")
        if done.returncode != 0:
            raise RuntimeError(f"navi {' '.join(args)}: {done.stderr.strip()[-400:]}")
        return json.loads(done.stdout)


def write_config(home: Path, persona: str, args: argparse.Namespace) -> None:
    config = home / "config"
    config.mkdir(parents=True)
    embedder = "ollama" if args.embedding_model else "none"
    (config / "config.toml").write_text(
        "[ollama]\n"
        f'chat_model = "{args.model}"\n'
        f'embedding_model = "{args.embedding_model or "none"}"\n'
        f"timeout_s = {args.chat_timeout}\n"
        f"background_timeout_s = {args.background_timeout}\n"
        f"reply_max_tokens = {args.reply_tokens}\n"
        "[memory]\n"
        f'embedder = "{embedder}"\n'
        f'profile = "{persona}"\n'
        "inactivity_timeout_min = 1440\n"
    )


def run_persona(spec: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    name = spec["name"]
    with tempfile.TemporaryDirectory(prefix=f"navi-bench-{name}-") as tmp:
        home = Path(tmp)
        write_config(home, name, args)
        navi = Navi(home, args.host)
        started = navi.run("daemon", "start", timeout=120)
        if started.returncode != 0:
            raise RuntimeError(f"daemon start: {started.stderr.strip()}")
        ends: list[dict[str, Any]] = []
        chats: list[float] = []
        probe: dict[str, Any] = {}
        try:
            for turns in spec["sessions"]:
                session_id = None
                for text in turns:
                    extra = ["--session", session_id] if session_id else []
                    t0 = time.perf_counter()
                    result = navi.json("chat", *extra, text)
                    chats.append(time.perf_counter() - t0)
                    session_id = result["session_id"]
                ends.append(end_session(navi, session_id))
                print(f"  {name}: session {len(ends)}: {ends[-1]['summary']}", flush=True)
            if spec.get("probe") and not args.no_probe:
                result = navi.json("chat", spec["probe"]["ask"])
                probe = {"reply": result["reply"], "user_message_id": result["user_message_id"]}
        finally:
            navi.run("daemon", "stop", timeout=300)
        db = home / "data" / "profiles" / name / "memory.db"
        stored = asyncio.run(read_profile(db, probe.get("user_message_id")))
    return score(spec, ends, chats, probe, stored)


def end_session(navi: Navi, session_id: str) -> dict[str, Any]:
    """``navi end`` once, then again (a retry) while the session stays pending."""
    attempts = []
    for _ in range(1 + RETRIES):
        t0 = time.perf_counter()
        (report,) = navi.json("end", "--session", session_id)
        attempts.append({"wall_s": round(time.perf_counter() - t0, 2), **report})
        if report["status"] != "pending":
            break
    first, last = attempts[0], attempts[-1]
    summary = ", ".join(f"{a['status']} {a['wall_s']:.0f} s" for a in attempts)
    if last["status"] == "pending":
        summary += f" ({last['reason']})"
    return {
        "attempts": attempts,
        "pending_first": first["status"] == "pending",
        "pending_last": last["status"] == "pending",
        "summary": summary,
    }


async def read_profile(db: Path, probe_message: int | None) -> dict[str, Any]:
    from navi_desktop.memory.store import MemoryStore

    async with await MemoryStore.open(db) as store:
        async with store.db.reading():
            rows = await store.db.fetchall(
                "SELECT id, kind, status, key, value, category, evidence, source FROM memories"
            )
            messages = await store.db.fetchall("SELECT role, content FROM messages")
            injected = []
            if probe_message is not None:
                injected = await store.db.fetchall(
                    "SELECT m.value FROM injections i JOIN memories m ON m.id = i.memory_id"
                    " WHERE i.message_id = ?",
                    (probe_message,),
                )
        profile, _ = await store.profile_summary()
    return {
        "memories": [dict(r) for r in rows],
        "user_text": "\n".join(m["content"] for m in messages if m["role"] == "user"),
        "injected": [r[0] for r in injected],
        "profile": profile or "",
    }


def score(
    spec: dict[str, Any],
    ends: list[dict[str, Any]],
    chats: list[float],
    probe: dict[str, Any],
    stored: dict[str, Any],
) -> dict[str, Any]:
    memories = stored["memories"]
    facts = [m for m in memories if m["kind"] == "fact"]
    active = [m for m in facts if m["status"] == "active"]
    held = [m for m in facts if m["status"] == "held"]
    rules = [m for m in memories if m["kind"] == "rule" and m["status"] in ("active", "held")]
    user_text = stored["user_text"]

    def fact_text(m: dict[str, Any]) -> str:
        return f"{m['key'] or ''} {m['value']}"

    found, missed = [], []
    for item in spec.get("expect", []):
        hit = any(
            contains(m["value"], v) or contains(fact_text(m), v)
            for m in active + held
            for v in item["values"]
        )
        (found if hit else missed).append(item["what"])
    rules_found = [
        item["what"]
        for item in spec.get("expect_rules", [])
        if any(contains(r["value"], v) for r in rules for v in item["values"])
    ]
    invented = [fact_text(m) for m in active if not supported(m["value"], user_text)]
    violations = []
    everything = [m["value"] for m in memories] + [stored["profile"]]
    for rule in spec.get("must_not", []):
        value, scope = rule["value"], rule["scope"]
        pool = (
            everything + [m["evidence"] or "" for m in memories]
            if scope == "anywhere"
            else [fact_text(m) for m in active]
        )
        if any(contains(text, value) for text in pool):
            violations.append(f"{value} ({rule['why']})")
    for item in spec.get("sensitive", []):
        if any(contains(fact_text(m), item["value"]) for m in active):
            violations.append(f"{item['value']} committed ({item['why']})")
    answer = spec.get("probe", {}).get("answer", [])
    attempts = [a for e in ends for a in e["attempts"]]
    return {
        "persona": spec["name"],
        "expected": len(spec.get("expect", [])),
        "found": found,
        "missed": missed,
        "rules_expected": len(spec.get("expect_rules", [])),
        "rules_found": rules_found,
        "invented": invented,
        "violations": violations,
        "held": len(held) + sum(1 for r in rules if r["status"] == "held"),
        "active_facts": [fact_text(m) for m in active],
        "sessions": len(ends),
        "pending_first": sum(e["pending_first"] for e in ends),
        "pending_last": sum(e["pending_last"] for e in ends),
        "pending_reasons": [a["reason"] for a in attempts if a["status"] == "pending"],
        "end_wall_s": [a["wall_s"] for a in attempts],
        "end_calls": [a.get("llm_calls", 0) for a in attempts],
        "dropped": sum(len(a.get("dropped") or []) for a in attempts),
        "offered": sum(a.get("offered") or 0 for a in attempts),
        "chat_wall_s": [round(c, 2) for c in chats],
        "probe_reply": probe.get("reply", ""),
        "probe_answered": bool(probe) and any(contains(probe["reply"], v) for v in answer),
        "probe_injected": bool(probe)
        and any(contains(text, v) for text in stored["injected"] for v in answer),
        "summaries": [m["value"] for m in memories if m["kind"] == "episode"],
        "profile": stored["profile"],
    }


def table(model: str, results: list[dict[str, Any]]) -> str:
    def total(key: str) -> int:
        return sum(len(r[key]) if isinstance(r[key], list) else r[key] for r in results)

    walls = [w for r in results for w in r["end_wall_s"]]
    calls = [c for r in results for c in r["end_calls"]]
    probes = [r for r in results if r["probe_reply"]]
    injected = sum(r["probe_injected"] for r in probes)
    answered = sum(r["probe_answered"] for r in probes)
    rows = [
        ("personas / sessions", f"{len(results)} / {total('sessions')}"),
        (
            "facts expected / found / missed",
            f"{total('expected')} / {total('found')} / {total('missed')}",
        ),
        ("rules expected / found", f"{total('rules_expected')} / {total('rules_found')}"),
        ("invented (committed without support)", str(total("invented"))),
        ("must-not violations", str(total("violations"))),
        ("held for review", str(total("held"))),
        ("candidates offered / dropped", f"{total('offered')} / {total('dropped')}"),
        ("sessions pending after the first end", str(total("pending_first"))),
        ("sessions pending after 2 retries", str(total("pending_last"))),
        (
            "session end: model calls, median (max)",
            f"{statistics.median(calls):.0f} ({max(calls)})" if calls else "-",
        ),
        (
            "session end: wall time, median (max)",
            f"{statistics.median(walls):.0f} s ({max(walls):.0f} s)" if walls else "-",
        ),
        (
            "later session: earlier memory injected / answer used it",
            f"{injected} / {answered} of {len(probes)}" if probes else "-",
        ),
    ]
    out = [f"| {model} | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", required=True, help="an Ollama-compatible server")
    parser.add_argument("--model", required=True, help="the chat (and extraction) model")
    parser.add_argument("--embedding-model", default="", help="none when empty")
    parser.add_argument("--personas", type=Path, default=PERSONAS)
    parser.add_argument("--only", default="", help="comma-separated persona names")
    parser.add_argument("--reply-tokens", type=int, default=96)
    parser.add_argument("--chat-timeout", type=float, default=600)
    parser.add_argument("--background-timeout", type=float, default=900)
    parser.add_argument("--no-probe", action="store_true", help="skip the later-session probe")
    parser.add_argument("--json", type=Path, help="write the raw results here")
    args = parser.parse_args(argv)

    specs = [json.loads(p.read_text()) for p in sorted(args.personas.glob("*.json"))]
    if args.only:
        keep = set(args.only.split(","))
        specs = [s for s in specs if s["name"] in keep]
    results = []
    t0 = time.perf_counter()
    for spec in specs:
        print(f"{spec['name']}: {spec['about']}", flush=True)
        results.append(run_persona(spec, args))
        r = results[-1]
        print(
            f"  found {r['found']} missed {r['missed']} invented {r['invented']}"
            f" violations {r['violations']} held {r['held']}",
            flush=True,
        )
    print(f"\n{len(specs)} personas in {time.perf_counter() - t0:.0f} s\n")
    print(table(args.model, results))
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "results": results}, indent=2))


if __name__ == "__main__":
    main()
