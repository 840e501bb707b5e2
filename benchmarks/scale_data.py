"""Synthetic data for the scale benchmarks: fact memories, queries, messages, an embedder.

Facts are short English sentences generated from word lists: categories, subjects that are
the user or named people, keys, values that often name places, companies or products. Each
(subject, key) is distinct, so no fact supersedes another. Up to 112,847 facts the people are
the 2,400 of FIRST x LAST; a larger profile adds generated surnames (see ``surnames``), so
each person keeps about as many facts as at 100k and names stay about as rare.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import zlib
from collections.abc import Iterator, Sequence

import numpy as np

from navi_desktop.memory import NewMemory

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


def _keyed() -> list[tuple[str, str, str]]:
    """Every (category, key, template); a relation key is one key per relation."""
    keyed: list[tuple[str, str, str]] = []
    for category, entries in FACTS.items():
        for key, template in entries:
            if "{rel}" in key:  # relation_sister, relation_brother, ...
                for rel in RELATIONS:
                    keyed.append(
                        (category, key.replace("{rel}", rel), template.replace("{rel}", rel))
                    )
            else:
                keyed.append((category, key, template))
    return keyed


KEYED = _keyed()
# Facts the base people can hold; a larger profile gets more surnames (see surnames).
BASE_FACTS = (1 + len(FIRST) * len(LAST)) * len(KEYED)
# The share of (subject, key) pairs a profile fills when it needs more surnames: about what
# 100k facts fill of BASE_FACTS.
FILL = 0.9


def surnames(memories: int | None = None) -> list[str]:
    """LAST, and for a profile larger than BASE_FACTS, generated surnames after it (two
    syllables and an ending, like "Kador"): as many as keep FILL of the pairs filled."""
    if memories is None or memories <= BASE_FACTS:
        return LAST
    wanted = math.ceil(memories / (FILL * len(KEYED) * len(FIRST)))
    taken = {name.casefold() for name in LAST}
    made = [
        f"{a.upper()}{b}{c}{d}{e}"
        for a, b, c, d, e in itertools.product("bdfgklmnprstvz", "aeiou", "dlmnrtv", "aeio", "nrs")
    ]
    random.Random(SEED).shuffle(made)
    extra = [name for name in made if name.casefold() not in taken]
    return LAST + extra[: max(0, wanted - len(LAST))]


def people(memories: int | None = None) -> list[str]:
    """Named people: 2400 up to BASE_FACTS memories, more (generated surnames) beyond."""
    return [f"{f} {ln}" for f in FIRST for ln in surnames(memories)]


def fact_batches(n: int, rng: random.Random, size: int = 1000) -> Iterator[list[NewMemory]]:
    """n facts with distinct (subject, key), so none supersedes another, ``size`` at a time
    (the same facts and random stream as ``synthetic_facts``, without holding all of them)."""
    subjects = ["user", *people(n)]
    combos = len(subjects) * len(KEYED)
    if n > combos:
        raise SystemExit(f"at most {combos} distinct facts can be generated, asked for {n}")
    picks = rng.sample(range(combos), n)
    for start in range(0, n, size):
        batch = []
        for p in picks[start : start + size]:
            subject = subjects[p // len(KEYED)]
            category, key, template = KEYED[p % len(KEYED)]
            # The value names its subject, as extracted facts do; it also keeps texts distinct.
            who = "The user" if subject == "user" else subject
            batch.append(
                NewMemory(
                    value=f"{who} {_fill(template, rng)}",
                    category=category,
                    subject=subject,
                    key=key,
                    source="conversation",
                    confidence=round(rng.uniform(0.6, 1.0), 2),
                )
            )
        yield batch


def synthetic_facts(n: int, rng: random.Random) -> list[NewMemory]:
    """n facts with distinct (subject, key), so none supersedes another."""
    return [fact for batch in fact_batches(n, rng) for fact in batch]


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


def synthetic_queries(q: int, rng: random.Random, memories: int | None = None) -> list[str]:
    """q queries; the people they name are those of a profile of ``memories`` facts."""
    folks = people(memories)
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
