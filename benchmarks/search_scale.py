"""Scale benchmark for the memory engine: hybrid search and message-save latency at N memories.

    python benchmarks/search_scale.py --memories 100000 --json out.json [--queries 200]

What it does, in a throw-away NAVI_HOME under the temp directory:

1. Builds a synthetic profile of N fact memories (short English facts generated from word
   lists: categories, subjects that are the user or named people, keys, values that often
   name places, companies or products) in batches of 1000 (one transaction each), then
   ``backfill_embeddings(batch=1000)``, all through the engine's public API
   (``add_memories``).
2. Hybrid search: Q varied queries (questions about a person, an attribute, free keywords)
   through ``store.search(query)`` with the embedder active, so all three signals run
   (FTS5 BM25, vector KNN, entity match) plus RRF fusion and hydration. Reports p50 and p95
   after a few warm-up queries (the first search loads the in-memory 1-bit index; that
   one-off cost is reported separately as ``index_load_ms``).
3. Vector recall: for a sample of queries, the vector signal's top 10 (1-bit coarse scan +
   exact cosine re-rank) against an exact brute-force cosine top 10 over all memory vectors.
4. Message save: 1000 ``store.save_message`` calls into one session on the N-memory profile
   (the hot path: one transaction, FTS row, entity links). Reports p50 and p99.
5. The size of the database file (plus its WAL) after all of the above.

Between building and measuring, ``os.sync()`` lets the kernel write the build back to disk:
timed straight after writing half a gigabyte, saves waited on that write-back.

The embedder is ``TopicEmbedder`` below, a benchmark-only stand-in for a real model: each
text's vector is the normalised sum of fixed pseudo-random 768-d vectors for its words, so
texts that share words are close. It costs about as much per query as a numpy sum (tens of
microseconds): hybrid latency here includes that and nothing of a real model's inference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np

from navi_desktop.memory import MemoryStore, NewMemory
from navi_desktop.memory.search_filters import make_filters

DIM = 768
SEED = 20240611

# -- synthetic data ---------------------------------------------------------------------------

FIRST = """Maria Alice John Priya Kenji Fatima Lucas Emma Olga Diego Sven Amara Noah Leila Tom
Hannah Ravi Chen Sofia Marco Ines Yusuf Grace Pavel Zoe Omar Lena Felix Aisha Ben Clara Hugo
Nadia Ivan Mei Samuel Rosa Tariq Julia Anton""".split()
LAST = """Lopez Smith Tanaka Novak Okafor Rossi Kowalski Garcia Nguyen Silva Müller Brown
Haddad Petrov Kim Dubois Jensen Costa Singh Moreau Walsh Ortiz Larsen Fischer Yilmaz Adeyemi
Bauer Castro Dahl Eriksen Ferreira Gallo Horvat Ito Jovanovic Kaur Lindqvist Mendes Nakamura
O'Brien Park Quinn Reyes Sato Takahashi Usman Varga Weber Xu Yamada Zhang Abbott Becker Chopra
Duarte Evans""".split()
CITIES = """Berlin Lisbon Tokyo Toronto Nairobi Madrid Oslo Seattle Austin Dublin Prague Lagos
Kyoto Boston Lyon Porto Denver Vienna Seoul Milan""".split()
COMPANIES = """Acme Globex Initech Umbrella Stark Wayne Hooli Vandelay Soylent Cyberdyne Tyrell
Aperture Wonka Oscorp Gringotts""".split()
LANGUAGES = "Python Rust Go TypeScript Haskell Kotlin Java Elixir Zig Swift".split()
TOOLS = """Neovim Emacs VSCode Docker Kubernetes Postgres SQLite Redis Terraform Git Ansible
Grafana""".split()
FOODS = """ramen sushi tacos pho lasagne curry falafel paella dumplings risotto pancakes
bibimbap""".split()
HOBBIES = """climbing chess cycling pottery gardening sailing running photography baking
birdwatching knitting surfing""".split()
COLORS = "blue green red teal orange purple yellow black".split()
ANIMALS = "cat dog parrot rabbit hamster tortoise".split()
PET_NAMES = "Biscuit Luna Pixel Mochi Pepper Ziggy Nala Otto".split()
CONDITIONS = [
    "a peanut allergy",
    "asthma",
    "a gluten intolerance",
    "migraines",
    "hay fever",
    "a bad knee",
    "lactose intolerance",
]
MUSIC = "jazz techno folk opera punk ambient salsa blues".split()
BOOKS = """Dune Middlemarch Neuromancer Beloved Solaris Emma Ulysses Foundation""".split()
PROJECTS = """Atlas Beacon Cobalt Drift Ember Falcon Granite Harbor Iris Juniper""".split()
ADJ = """reliable fast cheap local quiet open private minimal modern simple""".split()
RELATIONS = "sister brother manager friend mentor cousin colleague neighbour partner".split()

# category -> [(key, value template)]; fields in braces are drawn from the lists above.
FACTS: dict[str, list[tuple[str, str]]] = {
    "profile": [
        ("home_city", "lives in {city}"),
        ("hometown", "grew up in {city}"),
        ("employer", "works at {company}"),
        ("job_title", "works as a {adj} {lang} engineer"),
        ("birthday_month", "was born in {month}"),
        ("native_language", "speaks {tongue} natively"),
    ],
    "preferences": [
        ("favourite_food", "loves {food}"),
        ("disliked_food", "cannot stand {food}"),
        ("favourite_color", "favourite colour is {color}"),
        ("music_taste", "listens to {music} while working"),
        ("favourite_book", "re-reads {book} every year"),
        ("editor", "prefers {tool} for editing"),
        ("coffee_order", "drinks a {adj} flat white every morning"),
    ],
    "technical": [
        ("primary_language", "writes mostly {lang}"),
        ("deploy_tool", "deploys with {tool}"),
        ("database_choice", "prefers {tool} for small services"),
        ("os", "runs {distro} on the laptop"),
        ("shell", "uses {shell} as the login shell"),
    ],
    "projects": [
        ("current_project", "is building Project {project} in {lang}"),
        ("project_deadline", "must ship Project {project} by {month}"),
        ("side_project", "maintains a {adj} {lang} library called {project}"),
        ("project_stack", "runs Project {project} on {tool}"),
    ],
    "relationships": [
        ("relation_{rel}", "has a {rel} named {first}"),
        ("pet", "has a {animal} called {pet}"),
        ("relation_{rel}_city", "visits their {rel} in {city} often"),
    ],
    "health": [
        ("condition", "has {condition}"),
        ("exercise", "goes {hobby} twice a week"),
        ("sleep", "sleeps about {hours} hours a night"),
    ],
    "other": [
        ("hobby", "enjoys {hobby} at weekends"),
        ("travel_plan", "plans a trip to {city} in {month}"),
        ("learning", "is learning {tongue} on the side"),
    ],
}
MONTHS = """January February March April May June July August September October November
December""".split()
TONGUES = "Spanish Japanese German Portuguese Swahili Korean French Italian Polish".split()
DISTROS = "Fedora Debian Arch NixOS Ubuntu macOS".split()
SHELLS = "zsh fish bash nushell".split()


def _fill(template: str, rng: random.Random) -> str:
    pools = {
        "city": CITIES,
        "company": COMPANIES,
        "lang": LANGUAGES,
        "tool": TOOLS,
        "food": FOODS,
        "hobby": HOBBIES,
        "color": COLORS,
        "animal": ANIMALS,
        "pet": PET_NAMES,
        "condition": CONDITIONS,
        "music": MUSIC,
        "book": BOOKS,
        "project": PROJECTS,
        "adj": ADJ,
        "rel": RELATIONS,
        "first": FIRST,
        "month": MONTHS,
        "tongue": TONGUES,
        "distro": DISTROS,
        "shell": SHELLS,
        "hours": [str(h) for h in range(5, 10)],
    }
    return re.sub(r"\{(\w+)\}", lambda m: rng.choice(pools[m.group(1)]), template)


def people() -> list[str]:
    return [f"{f} {ln}" for f in FIRST for ln in LAST]  # 2400 named people


def synthetic_facts(n: int, rng: random.Random) -> list[NewMemory]:
    """n facts with distinct (subject, key), so none supersedes another."""
    subjects = ["user", *people()]
    keyed: list[tuple[str, str, str]] = []  # (category, key, template)
    for category, entries in FACTS.items():
        for key, template in entries:
            if "{rel}" in key:  # one key per relation: relation_sister, relation_brother, ...
                for rel in RELATIONS:
                    keyed.append(
                        (category, key.replace("{rel}", rel), template.replace("{rel}", rel))
                    )
            else:
                keyed.append((category, key, template))
    combos = len(subjects) * len(keyed)
    if n > combos:
        raise SystemExit(f"at most {combos} distinct facts can be generated, asked for {n}")
    picks = rng.sample(range(combos), n)
    out = []
    for p in picks:
        subject = subjects[p // len(keyed)]
        category, key, template = keyed[p % len(keyed)]
        # The value names its subject, as extracted facts do; it also keeps texts distinct.
        who = "The user" if subject == "user" else subject
        out.append(
            NewMemory(
                value=f"{who} {_fill(template, rng)}",
                category=category,
                subject=subject,
                key=key,
                source="conversation",
                confidence=round(rng.uniform(0.6, 1.0), 2),
            )
        )
    return out


QUESTIONS = [
    "where does {person} live",
    "what does {person} do for work",
    "what food does {person} like",
    "who is {person}'s {rel}",
    "does {person} have any allergies",
    "what is my favourite colour",
    "which editor do I prefer",
    "what am I building in {lang}",
    "when is the Project {project} deadline",
    "who works at {company}",
    "people in {city}",
    "{food} recommendations",
    "how do we deploy with {tool}",
    "my {rel} in {city}",
    "{person}",
    "{lang} {tool} setup",
    "trip to {city} in {month}",
    "what does {person} listen to while working",
    "is anyone learning {tongue}",
    "pet {animal} name",
]


def synthetic_queries(q: int, rng: random.Random) -> list[str]:
    folks = people()
    out = []
    for i in range(q):
        template = QUESTIONS[i % len(QUESTIONS)].replace("{person}", rng.choice(folks))
        out.append(_fill(template, rng))
    rng.shuffle(out)
    return out


MESSAGES = [
    "can you remind me what {person} said about Project {project}?",
    "I'm flying to {city} in {month}, any tips?",
    "the {tool} deploy failed again with a timeout",
    "let's rewrite the parser in {lang}",
    "ok thanks, that worked",
    "{person} recommended a {food} place near the office",
    "what's the command to list {tool} containers",
    "I had {food} for lunch, it was great",
]


def synthetic_messages(n: int, rng: random.Random) -> list[tuple[str, str]]:
    folks = people()
    out = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        text = _fill(rng.choice(MESSAGES).replace("{person}", rng.choice(folks)), rng)
        if role == "assistant":
            text = f"Sure, about that: {text.rstrip('?.')}. Here is what I found in my notes."
        out.append((role, text))
    return out


# -- embedder ---------------------------------------------------------------------------------

_TOKEN = re.compile(r"\w+")


class TopicEmbedder:
    """Deterministic bag-of-words embedder: normalised sum of a fixed random vector per word.

    Benchmark-only (implements the ``Embedder`` protocol). Texts sharing words are close, so
    the vector signal has real neighbours to find; a word's vector comes from its CRC32 seed.
    """

    model = "bench/topic-768"

    def __init__(self, dim: int = DIM) -> None:
        self.dim = dim
        self._vocab: dict[str, np.ndarray] = {}

    def _word(self, word: str) -> np.ndarray:
        vec = self._vocab.get(word)
        if vec is None:
            rng = np.random.default_rng(zlib.crc32(word.encode()))
            vec = rng.standard_normal(self.dim).astype(np.float32)
            self._vocab[word] = vec
        return vec

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in _TOKEN.findall(text.casefold()):
                out[i] += self._word(word)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms

    async def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        return self.embed_sync(texts)


# -- measuring --------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


async def build(store: MemoryStore, n: int, rng: random.Random) -> dict[str, float | None]:
    facts = synthetic_facts(n, rng)
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        results = await store.add_memories(facts[start : start + 1000], actor="bench")
        assert all(r.action == "added" for r in results), "synthetic facts must not collide"
        if start and start % 10000 == 0:
            print(f"  added {start} ({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
    t1 = time.perf_counter()
    embedded = await store.backfill_embeddings(batch=1000)
    t2 = time.perf_counter()
    assert embedded == n, (embedded, n)
    return {"add_s": t1 - t0, "embed_s": t2 - t1, "build_s": t2 - t0}


async def time_search(store: MemoryStore, queries: list[str]) -> tuple[list[float], float]:
    t0 = time.perf_counter()
    await store.search("warm up the index")  # loads the in-memory 1-bit index
    load_ms = (time.perf_counter() - t0) * 1000
    for q in queries[:5]:
        await store.search(q)
    times = []
    for q in queries:
        t0 = time.perf_counter()
        hits = await store.search(q)
        times.append((time.perf_counter() - t0) * 1000)
        assert hits, f"no hits for {q!r}"
    return times, load_ms


async def vector_recall(
    store: MemoryStore, embedder: TopicEmbedder, queries: list[str], k: int = 10
) -> float:
    """Mean recall@k of the vector signal (coarse + re-rank) against exact brute force."""
    async with store.db.reading():
        rows = await store.db.fetchall(
            "SELECT memory_id, vector FROM embeddings WHERE memory_id IS NOT NULL AND model = ?",
            (embedder.model,),
        )
    ids = np.array([r[0] for r in rows])
    matrix = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
    # The vector signal on its own (engine internals): store.search fuses it with the others.
    filters = make_filters(None, None, None, None, None, False)
    recalls = []
    for q in queries:
        vec = embedder.embed_sync([q])[0]
        exact = set(ids[np.argsort(-(matrix @ vec), kind="stable")[:k]].tolist())
        knn = partial(store._knn, await store._codes(vec), vec, filters)
        got = {key[1] for key, _ in (await store.db.read(knn))[:k]}
        recalls.append(len(exact & got) / k)
    return float(np.mean(recalls))


async def time_saves(store: MemoryStore, count: int, rng: random.Random) -> list[float]:
    session = await store.create_session("bench")
    times = []
    for role, text in synthetic_messages(count, rng):
        t0 = time.perf_counter()
        await store.save_message(session.id, role, text)
        times.append((time.perf_counter() - t0) * 1000)
    return times


async def run(n: int, q: int, saves: int, recall_sample: int, home: Path | None) -> dict:
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory(prefix="navi-bench-") as tmp:
        os.environ["NAVI_HOME"] = str(home or tmp)
        embedder = TopicEmbedder()
        store = await MemoryStore.open_profile("bench", embedder=embedder)
        try:
            existing = (await store.stats())["memories"].get("fact", {}).get("active", 0)
            if existing == n:  # a kept profile (--home): measure it again, skip the build
                print(f"reusing the {n} memories in {home}", file=sys.stderr)
                timings = {"add_s": None, "embed_s": None, "build_s": None}
                synthetic_facts(n, rng)  # keep the random stream as in a fresh run
            elif existing:
                raise SystemExit(f"{home} holds {existing} memories, not {n}: use another --home")
            else:
                print(f"building {n} memories ...", file=sys.stderr)
                timings = await build(store, n, rng)
                # Half a gigabyte was just written: let the kernel finish writing it back, or
                # the timings below measure the disk under that load (saves, p99 7.6 ms).
                os.sync()
            queries = synthetic_queries(q, rng)
            search_ms, load_ms = await time_search(store, queries)
            recall = await vector_recall(store, embedder, queries[:recall_sample])
            save_ms = await time_saves(store, saves, rng)
            db_path = store.path
        finally:
            await store.close()  # checkpoints the WAL into the file
        size = sum(p.stat().st_size for p in (db_path, Path(f"{db_path}-wal")) if p.exists())
    return {
        "memories": n,
        "hybrid_ms_p50": round(statistics.median(search_ms), 2),
        "hybrid_ms_p95": round(pct(search_ms, 95), 2),
        "save_ms_p50": round(statistics.median(save_ms), 3),
        "save_ms_p99": round(pct(save_ms, 99), 3),
        "file_bytes": size,
        "hybrid_ms_max": round(max(search_ms), 2),
        "save_ms_max": round(max(save_ms), 3),
        "queries": q,
        "saves": saves,
        "index_load_ms": round(load_ms, 1),
        "vector_recall_at_10": round(recall, 3),
        "recall_sample": min(recall_sample, q),
        "vector_candidates": store.tuning.rerank,  # read in full for the exact re-rank
        **{k: None if v is None else round(v, 1) for k, v in timings.items()},
        "embedder": f"{TopicEmbedder.model} (bag of random word vectors; query cost ~numpy sum)",
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, required=True, help="fact memories to build")
    parser.add_argument("--json", type=Path, required=True, help="where to write the results")
    parser.add_argument("--queries", type=int, default=200, help="hybrid searches to time")
    parser.add_argument("--saves", type=int, default=1000, help="messages to save and time")
    parser.add_argument("--recall-sample", type=int, default=50, help="queries for recall@10")
    parser.add_argument(
        "--home", type=Path, help="keep the profile in this NAVI_HOME and reuse it next time"
    )
    args = parser.parse_args(argv)
    result = asyncio.run(
        run(args.memories, args.queries, args.saves, args.recall_sample, args.home)
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    built = (
        f"built in {result['build_s']}s (add {result['add_s']}s, embed {result['embed_s']}s)"
        if result["build_s"] is not None
        else "reused"
    )
    print(
        f"{result['memories']} memories, {built}, file {result['file_bytes'] / 1e6:.1f} MB\n"
        f"hybrid search: p50 {result['hybrid_ms_p50']} ms, p95 {result['hybrid_ms_p95']} ms"
        f" over {result['queries']} queries (first search, index load:"
        f" {result['index_load_ms']} ms)\n"
        f"message save:  p50 {result['save_ms_p50']} ms, p99 {result['save_ms_p99']} ms"
        f" over {result['saves']} saves\n"
        f"vector recall@10 vs brute force: {result['vector_recall_at_10']}"
        f" ({result['recall_sample']} queries,"
        f" {result['vector_candidates']} re-ranked candidates)\n"
        f"embedder: {result['embedder']}; load average {result['load_avg']}"
    )


if __name__ == "__main__":
    main()
