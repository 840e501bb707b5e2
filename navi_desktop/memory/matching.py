"""The matching rule of forgetting: where else a forgotten value occurs, and its redaction.

A value matches text when, after both are normalised, the value's words appear in the text in
the same order as whole words:

* normalised = NFKC, case-folded, curly quotes made straight, characters drawn as nothing
  (a soft hyphen, a zero-width space) dropped, accents off Latin letters (as the search index
  folds them: "Zoë" matches "zoe", so no variant that a search finds is left); a run of spaces
  (any kind) is one space, and punctuation at the value's ends is dropped ("Bob." matches
  "bob");
* whole words = no letter or digit right before or after the match ("Bob" matches "Bob's" and
  "(bob)", not "Bobby" or "kebob"). Text without spaces between words (Chinese, Japanese) has
  no boundaries to check, so there a value matches inside longer runs.

A phrase forgotten everywhere (found again by its hash, see ``phrases``) is words only: it
matches the same words in the same order, whatever non-word characters stand between them
("pelican 9439" matches "PELICAN-9439"), and the redaction takes the text as written from its
first word to its last.

A value needs explicit confirmation before it is matched everywhere when it is very short
(fewer than 3 characters once normalised) or made only of very common words ("yes", "the
one"): such values occur in unrelated text. Pure functions, no database.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from navi_desktop.memory.textproc import _CJK, IGNORABLE, STOPWORDS, normalize, tokens

MARKER = "[forgotten]"
MIN_CHARS = 3
# Everyday chat words, besides the function words: a value made only of these is "common".
COMMON_WORDS = STOPWORDS | frozenset(
    """yes no ok okay yeah yep nope hi hey hello bye thanks thank please sure fine good great
    well right maybe one two three four five six seven eight nine ten home work today tomorrow
    yesterday time day week year man woman people thing things something nothing everything
    name friend mom dad mum user assistant navi""".split()
)
_QUOTES = (("\u2018", "'"), ("\u2019", "'"), ("\u201c", '"'), ("\u201d", '"'), ("`", "'"))
_CJK_EDGE = re.compile(f"[{_CJK}]")
_ACCENTS = re.compile("(?<=[a-z])[\u0300-\u036f]+")  # combining marks on a Latin letter


def _straight(text: str) -> str:
    # One replace per quote mark present: far faster than str.translate on long texts.
    for curly, plain in _QUOTES:
        if curly in text:
            text = text.replace(curly, plain)
    return text


def _bare(text: str) -> str:
    """``text`` (case-folded) without accents on Latin letters, as the search index's
    tokenizer drops them (remove_diacritics): other scripts' marks are part of their words."""
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", _ACCENTS.sub("", decomposed))


def fold(text: str) -> str:
    """One piece of text in the matching form (no position bookkeeping)."""
    if text.isascii():
        return _straight(text.lower())
    return _straight(_bare(IGNORABLE.sub("", unicodedata.normalize("NFKC", text).casefold())))


def _phrase_form(value: str) -> str:
    # Accents kept: forgotten phrases were hashed in this form, and must still be found.
    return _straight(normalize(value))


def needle_form(value: str) -> str:
    """A value as it is matched: normalised, quotes straight, single spaces."""
    return _bare(_phrase_form(value))


def broad_reason(value: str) -> str | None:
    """Why matching this value everywhere could remove unrelated text, or None."""
    norm = needle_form(value)
    if len(norm) < MIN_CHARS:
        return f"it is very short ({len(norm)} character{'s' if len(norm) != 1 else ''})"
    words = tokens(norm)
    if words and all(w in COMMON_WORDS for w in words):
        return "it is made of very common words"
    return None


def _pattern(norm: str) -> str:
    words = norm.split(" ")
    body = r"\s+".join(re.escape(w) for w in words)
    # A boundary only where the value itself begins or ends with a letter or digit.
    head = r"(?<!\w)" if re.match(r"\w", norm) and not _CJK_EDGE.match(norm[0]) else ""
    tail = r"(?!\w)" if re.search(r"\w$", norm) and not _CJK_EDGE.match(norm[-1]) else ""
    return head + body + tail


_EDGE_OF_WORD = f"[^\\W{_CJK}]"  # a character inside a word that is not CJK (see ``tokens``)


def _words_pattern(phrase: str) -> str:
    """A phrase's words as ``tokens`` splits text: whole words, in order, any non-word
    characters between two of them (none needed beside a CJK character, its own word)."""
    words = phrase.split(" ")
    cjk = [(bool(_CJK_EDGE.match(w[0])), bool(_CJK_EDGE.match(w[-1]))) for w in words]
    body = re.escape(words[0])
    for (_, after_cjk), (before_cjk, _), word in zip(cjk, cjk[1:], words[1:], strict=False):
        body += (r"\W*" if after_cjk or before_cjk else r"\W+") + re.escape(word)
    head = "" if cjk[0][0] else f"(?<!{_EDGE_OF_WORD})"
    tail = "" if cjk[-1][1] else f"(?!{_EDGE_OF_WORD})"
    return head + body + tail


def _folded(text: str) -> tuple[str, list[int], list[int]]:
    """``text`` folded, with the start and end (in ``text``) of the character each folded
    character came from. A base character and the combining marks after it fold together."""
    if text.isascii():
        idx = list(range(len(text)))
        return _straight(text.lower()), idx, [i + 1 for i in idx]
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    i, n = 0, len(text)
    while i < n:
        j = i + 1
        while j < n and unicodedata.combining(text[j]):
            j += 1
        piece = fold(text[i:j])
        out.append(piece)
        starts.extend([i] * len(piece))
        ends.extend([j] * len(piece))
        i = j
    return "".join(out), starts, ends


@dataclass(frozen=True)
class Matcher:
    """Finds and redacts a set of values (the longest first, so a quote wins over a value
    inside it)."""

    needles: tuple[str, ...]
    regex: re.Pattern[str] | None
    anchors: tuple[str, ...]  # one word of each needle: a cheap test before the full match
    words: bool = False  # needles are phrases of words (``of_phrases``), not values

    @classmethod
    def of(cls, values: Iterable[str]) -> Matcher:
        """Values as written (a memory's value, its evidence): see the module's rule."""
        return cls._build(values, words=False)

    @classmethod
    def of_phrases(cls, found: Iterable[str]) -> Matcher:
        """Phrases forgotten everywhere as ``phrases`` gives them (words, no punctuation): each
        matches its words in text as written, punctuation and all ("pelican 9439" redacts
        "PELICAN-9439"). A phrase must never go through ``of``: its words would be looked
        for with single spaces between them, and a value with punctuation inside stayed."""
        return cls._build(found, words=True)

    @classmethod
    def _build(cls, texts: Iterable[str], *, words: bool) -> Matcher:
        pattern = _words_pattern if words else _pattern
        norms = sorted({n for t in texts if (n := cls._form(t, words))}, key=len, reverse=True)
        if not norms:
            return cls((), None, (), words=words)
        regex = re.compile("|".join(pattern(n) for n in norms))
        anchors = tuple(max(n.split(" "), key=len) for n in norms)
        return cls(tuple(norms), regex, anchors, words=words)

    @staticmethod
    def _form(value: str, words: bool) -> str:
        return _bare(phrase_of(value)) if words else needle_form(value)

    def form(self, value: str) -> str:
        """``value`` in the form the needles are in: a memory whose value is one of them in
        this form is the same memory (forgotten whole, not redacted)."""
        return self._form(value, self.words)

    def __bool__(self) -> bool:
        return self.regex is not None

    def may_match(self, text: str | None) -> bool:
        if not text or self.regex is None:
            return False
        folded = fold(text)
        return any(a in folded for a in self.anchors)

    def spans(self, text: str | None) -> list[tuple[int, int]]:
        """Where the values occur in ``text`` (start, end), in order."""
        if not self.may_match(text):
            return []
        assert text is not None and self.regex is not None
        folded, starts, ends = _folded(text)
        return [(starts[m.start()], ends[m.end() - 1]) for m in self.regex.finditer(folded)]

    def redact(self, text: str | None, marker: str = MARKER) -> tuple[str | None, int]:
        """``text`` with every occurrence replaced by ``marker``, and how many there were."""
        found = self.spans(text)
        if not found:
            return text, 0
        assert text is not None
        parts, last = [], 0
        for start, end in found:
            start = max(start, last)  # two matches folded from one character
            parts += [text[last:start], marker]
            last = max(end, last)
        parts.append(text[last:])
        return "".join(parts), len(found)

    def redact_json(self, raw: str | None, *, ensure_ascii: bool = True) -> tuple[str | None, int]:
        """A JSON document with every string (keys too) redacted; escaped text is matched as
        the text it stands for. Without a backslash, the strings are in ``raw`` as they are."""
        if not raw or self.regex is None:
            return raw, 0
        if "\\" not in raw and not self.may_match(raw):
            return raw, 0
        try:
            data = json.loads(raw)
        except ValueError:
            return self.redact(raw)
        count = 0

        def walk(item: Any) -> Any:
            nonlocal count
            if isinstance(item, str):
                new, n = self.redact(item)
                count += n
                return new
            if isinstance(item, list):
                return [walk(x) for x in item]
            if isinstance(item, dict):
                return {walk(k): walk(v) for k, v in item.items()}
            return item

        new = walk(data)
        if not count:
            return raw, 0
        return json.dumps(new, ensure_ascii=ensure_ascii), count

    def snippet(self, text: str, width: int = 70) -> str | None:
        """A short excerpt around the first occurrence, the match in «guillemets»."""
        found = self.spans(text)
        if not found:
            return None
        start, end = found[0]
        room = max(0, (width - (end - start)) // 2)
        left, right = max(0, start - room), min(len(text), end + room)
        body = f"{text[left:start]}«{text[start:end]}»{text[end:right]}"
        body = " ".join(body.split())
        return ("…" if left else "") + body + ("…" if right < len(text) else "")


def phrases(text: str, lengths: Iterable[int]) -> set[str]:
    """Every run of ``n`` consecutive words of ``text``, for each ``n`` in ``lengths``, in the
    forms forgotten phrases are hashed in (``phrase_forms``): "ZQXSECRÉT42" is looked up as
    itself and as "zqxsecret42", as matching and search take it."""
    words = tokens(_phrase_form(text))
    out: set[str] = set()
    for n in set(lengths):
        for i in range(len(words) - n + 1):
            out.add(" ".join(words[i : i + n]))
    return out | {_bare(p) for p in out}


def strings_in(value: Any) -> Iterator[str]:
    """Every string in a decoded JSON value, keys too. Forgotten words are looked for in the
    text each stands for: in the JSON as stored, escapes ("\\n", "\\u00c9") split them."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)


def json_texts(raw: str) -> Iterator[str]:
    """The strings of a stored JSON document (``strings_in``), or ``raw`` when it is none."""
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if isinstance(value, dict | list):
        yield from strings_in(value)
    else:
        yield raw


def phrase_of(value: str) -> str:
    """The words of a forgotten value, as its phrase tombstone is hashed."""
    return " ".join(tokens(_phrase_form(value)))


def phrase_forms(value: str) -> set[str]:
    """The forms a forgotten value's phrase is buried in: as written (the form phrases were
    first hashed in, which older tombstones have) and without accents (see ``_bare``)."""
    phrase = phrase_of(value)
    return {phrase, _bare(phrase)}
