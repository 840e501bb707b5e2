"""Text handling shared by storage and search: normalisation, CJK segmentation, safe FTS queries."""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata

# Scripts written without spaces: each character becomes its own token so that
# FTS5's unicode61 tokenizer (which splits on spaces and punctuation only) can match inside them.
_CJK = (
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3400-\u4dbf"  # CJK Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\U00020000-\U0002ebef"  # CJK Extensions B-F
)
_CJK_CHAR = re.compile(f"[{_CJK}]")
_WORD = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")
_SPACES = re.compile(r"\s+")
# Unicode's default-ignorable code points (soft hyphen, zero-width space and joiners, bidi
# marks, variation selectors...): drawn as nothing, so "Plon\u00adkor" reads "Plonkor" and
# must compare as it. Text pasted from web pages and PDFs is full of soft hyphens.
IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)

# Function words that carry no meaning in a query: NLTK's English list (other languages rely
# on BM25's IDF). Contractions appear split, as the tokenizer splits them.
STOPWORDS = frozenset(
    """i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
    yourselves he him his himself she she's her hers herself it it's its itself they them
    their theirs themselves what which who whom this that that'll these those am is are was
    were be been being have has had having do does did doing a an the and but if or because
    as until while of at by for with about against between into through during before after
    above below to from up down in out on off over under again further then once here there
    when where why how all any both each few more most other some such no nor not only own
    same so than too very s t can will just don don't should should've now d ll m o re ve y
    ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven
    haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn
    shouldn't wasn wasn't weren weren't won won't wouldn wouldn't""".split()
)


def normalize(text: str) -> str:
    """Canonical form for comparing text: NFKC, case-folded, single spaces, no edge punctuation."""
    text = IGNORABLE.sub("", unicodedata.normalize("NFKC", text).casefold())
    return _SPACES.sub(" ", text).strip().strip(".,;:!?\"'()[]{} ")


def normalize_key(subject: str | None, key: str | None) -> str:
    """The identity of a fact: who it is about and which attribute (``user:favourite_color``)."""
    subj = normalize(subject or "user")
    if subj in {"i", "me", "myself", "the user"}:
        subj = "user"
    k = re.sub(r"[\s\-/]+", "_", normalize(key or ""))
    return f"{subj}:{k}"


def tokens(text: str) -> list[str]:
    """Unicode-aware word tokens, case-folded; CJK split into single characters."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def jaccard(a: str, b: str) -> float:
    ta, tb = set(tokens(a)), set(tokens(b))
    if not ta and not tb:
        return 1.0
    return len(ta & tb) / len(ta | tb)


def segment(text: str) -> str:
    """Text as indexed by FTS5: CJK characters spaced apart, everything else unchanged."""
    if not _CJK_CHAR.search(text):
        return text
    return _CJK_CHAR.sub(lambda m: f" {m.group(0)} ", text)


def fts_terms(text: str, *, drop_stopwords: bool = True) -> list[str]:
    """Any user text as safe FTS5 terms, quoted, one per distinct word (or CJK run).

    Operators, quotes, ``*``, ``-`` and parentheses in the input are treated as plain text;
    a run of CJK characters becomes a phrase so it matches as a substring. Stopwords are
    dropped unless nothing else is left; an empty list means nothing is searchable.
    """
    normalized = unicodedata.normalize("NFKC", text).casefold()
    terms: list[str] = []
    seen: set[str] = set()
    for chunk in re.findall(rf"[{_CJK}]+|[^\W{_CJK}]+", normalized):
        term = '"' + " ".join(chunk) + '"' if _CJK_CHAR.match(chunk) else '"' + chunk + '"'
        if term not in seen:
            seen.add(term)
            terms.append(term)
    if drop_stopwords:
        kept = [t for t in terms if t.strip('"') not in STOPWORDS]
        terms = kept or terms
    return terms


# Capitalised words that start many sentences but name nothing.
_NOT_NAMES = STOPWORDS | frozenset(
    """yes no ok okay hey hi hello thanks thank yeah wow oh sure great good well also so
    yesterday today tomorrow monday tuesday wednesday thursday friday saturday sunday january
    february march april may june july august september october november december""".split()
)
_NAME = re.compile(r"(?<![\w'])([A-Z][\w'\-]*[\w]|[A-Z]{2,6})(?![\w'])")


def entity_names(text: str) -> list[str]:
    """Likely names (people, places, products) in free text: capitalised words, not function words.

    Deliberately simple and language-agnostic; the extraction step supplies better entities.
    """
    found: dict[str, str] = {}
    for m in _NAME.finditer(text):
        word = m.group(1)
        norm = normalize(word)
        if norm.endswith("'s"):
            norm = norm[:-2]
        if len(norm) < 2 or norm in _NOT_NAMES:
            continue
        found.setdefault(norm, word)
    return list(found)


def keyed_hash(secret: bytes, text: str) -> str:
    """HMAC of normalised text: tombstones prove a match without keeping (or leaking) the text."""
    return hmac.new(secret, normalize(text).encode(), hashlib.sha256).hexdigest()
