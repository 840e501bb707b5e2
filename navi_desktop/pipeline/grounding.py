"""Is what a model wrote supported by what was said? Checks that need no model.

- A candidate's evidence quote must be a substantial span of the user's own words (not one
  common word, not the assistant's text), and its value must be grounded in that quote or the
  message it comes from.
- A summary (of a session, or the profile) must take its content words from its sources;
  sentences about sensitive matters are left out. When nothing survives, an extractive
  fallback is used: the user's own key sentences, or the facts themselves.
- A reflection's insight must take its content words from the facts it connects (it is
  dropped otherwise); one on a sensitive matter waits for the user's review.

Deliberately tolerant of wording ("lives" for "live", "beekeeping" for "bees"): they catch
invented names, numbers and topics, not style.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from navi_desktop.memory.textproc import STOPWORDS, tokens
from navi_desktop.pipeline.policy import is_sensitive, squash

# Words that carry no claim of their own: function words of the languages users write in,
# and the reporting verbs and nouns every summary uses.
NEUTRAL = STOPWORDS | frozenset(
    """user users assistant navi conversation chat session talk talked talks discussed discuss
    discussion mentioned mention said says say told tell asked ask asks shared share explained
    explain introduced introduce wants want wanted likes like liked also would could may might
    one two three part parts first second new old good great well really much many lot lots
    thing things something anything everything way ways time times day days today now still
    get gets got make makes made use uses used using need needs know knows think thinks feel
    feels help helps helped question questions answer answers topic topics about regarding
    including include includes currently usually often always never sometimes long short
    some another other others their person people they them someone everyone let lets
    went go goes going come comes came keep keeps kept live lives lived living work works
    worked working enjoy enjoys enjoyed love loves loved prefer prefers preferred play plays
    based currently him her his hers le la les un une des
    de du et est en au aux pour par sur dans que qui je tu il elle nous vous ils elles mon
    ma mes ton ta tes son sa ses der die das ein eine und ist ich du er sie wir ihr mein
    meine nicht mit von zu im el los las y es yo mi mis por para con del al lo se""".split()
)
_FIRST_PERSON = frozenset(
    "i i'm i've my me mine je j moi mon ma mes ich mein meine mich mir yo mi mis me".split()
)
# Health and intimate matters have no category in a summary: recognise them by words.
_HEALTH = re.compile(
    r"\b(diagnos\w*|disease|illness|ill|sick|cancer|tumou?r|diabet\w*|epilep\w*|seizure\w*|"
    r"depress\w*|anxiety|panic attack\w*|adhd|autis\w*|bipolar|schizo\w*|therap\w*|"
    r"psychiatr\w*|medication|prescri\w*|pills?|surgery|hospitali[sz]\w*|pregnan\w*|"
    r"miscarriage|allerg\w*|hiv|std|disabilit\w*|addict\w*|rehab|suicid\w*|self-harm|"
    r"divorc\w*|affair|sexual\w*|religio\w*|arrest\w*|criminal)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
# "Translate this: …", "Summarise the following: …": what follows is material to work on,
# not something the user says about themselves.
_TASK = re.compile(
    r"^\W*(?:please\s+|can you\s+|could you\s+)?(?:translate|summari[sz]e|rewrite|rephrase|"
    r"paraphrase|proofread|correct|fix|format|convert|explain|review|check|edit|shorten|"
    r"expand|improve|simplify|reply to|answer|traduis|résume|übersetze|fasse|traduce|"
    r"resume)\b[^:\n]{0,60}[:\n]",
    re.IGNORECASE,
)
# Credentials: by name, or by the look of a key (a known prefix, or a long run of letters and
# digits mixed).
_SECRET = re.compile(
    r"\b(api[ _-]?keys?|access[ _-]?tokens?|auth[ _-]?tokens?|secret|password|passphrase|"
    r"private[ _-]?key|ssh[ _-]?key|pin code)\b|\b(?:sk|pk|rk|ghp|gho|xox[abp]|AKIA)[-_]?"
    r"[A-Za-z0-9_-]{8,}|\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{20,}\b",
    re.IGNORECASE,
)
MIN_QUOTE_CHARS = 5
SUMMARY_GROUNDED = 0.6  # share of a summary's content words that must come from its sources


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s", "ly"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    return word[:6]


def content_words(text: str) -> list[str]:
    """The words of ``text`` that make a claim: not function words, not one-letter tokens
    (a CJK character counts)."""
    return [w for w in tokens(text) if w not in NEUTRAL and (len(w) > 1 or ord(w[0]) > 0x2E7F)]


class Vocabulary:
    """The words of some source texts, for "does this word come from there?"."""

    def __init__(self, texts: Iterable[str]) -> None:
        words = {w for text in texts for w in content_words(text)}
        self.words = words
        self.stems = {_stem(w) for w in words}

    def has(self, word: str) -> bool:
        if word in self.words:
            return True
        if any(ch.isdigit() for ch in word):
            return False  # numbers must match exactly: a changed number is a changed fact
        stem = _stem(word)
        if stem in self.stems:
            return True
        # Compounds and derived forms: "beekeeping" / "bees", "Lisbon's" / "Lisbon".
        return len(stem) >= 3 and any(
            len(s) >= 3 and (stem.startswith(s) or s.startswith(stem)) for s in self.stems
        )

    def share(self, text: str) -> tuple[float, list[str]]:
        """The share of ``text``'s content words found here (1.0 when it has none), and the
        words that were not."""
        words = content_words(text)
        missing = [w for w in words if not self.has(w)]
        return (1.0 - len(missing) / len(words) if words else 1.0), missing


# ---- candidates -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Transcript:
    """A session's messages by speaker, squashed once: (message id, text) pairs."""

    user: tuple[tuple[int, str], ...]
    assistant: tuple[tuple[int, str], ...]
    tool: tuple[tuple[int, str], ...]

    @classmethod
    def of(cls, messages: Sequence[object]) -> Transcript:
        by_role: dict[str, list[tuple[int, str]]] = {"user": [], "assistant": [], "tool": []}
        for m in messages:
            role = getattr(m, "role", "")
            if role in by_role:
                by_role[role].append((getattr(m, "id", 0), squash(str(getattr(m, "content", "")))))
        return cls(tuple(by_role["user"]), tuple(by_role["assistant"]), tuple(by_role["tool"]))

    def first_with(self, quote: str) -> int | None:
        """The id of the earliest message that holds ``quote`` (squashed)."""
        lines = (*self.user, *self.assistant, *self.tool)
        return min((mid for mid, text in lines if quote in text), default=None)


def _holder(quote: str, lines: Iterable[tuple[int, str]]) -> str | None:
    return next((text for _, text in lines if quote in text), None)


def check_candidate(
    value: str, evidence: str, transcript: Transcript, *, kind: str = "fact"
) -> str | None:
    """Why this candidate cannot be kept, or None. ``value`` is a fact's value or a rule's
    instruction; ``evidence`` its quote."""
    quote = squash(evidence)
    if len(quote) < MIN_QUOTE_CHARS or len(tokens(quote)) < 2 or not content_words(quote):
        return f"quote too short to show anything ({one_word(evidence)})"
    holder = _holder(quote, transcript.user) or _holder(quote, transcript.tool)
    if holder is None:
        holder = _holder(quote, transcript.assistant)
        if holder is None:
            return "evidence quote not found in the conversation"
        if kind == "fact":
            return "quote is the assistant's words, not the user's"
    # A quote outside the user's words: the write policy decides what it may become.
    if kind == "fact" and (why := _not_a_statement(quote, holder)):
        return why
    if _SECRET.search(value) or _SECRET.search(evidence):
        return "looks like a secret, never kept"
    said = squash(value)
    if said and (said in quote or said in holder):
        return None
    words = content_words(value)
    if not words:
        return "value says nothing"
    vocab = Vocabulary([quote, holder])
    share, missing = vocab.share(value)
    if share < 0.5:
        return f"value not supported by its quote ({', '.join(missing[:3])})"
    return None


def _not_a_statement(quote: str, holder: str) -> str | None:
    """A quote from material the user asked to work on, or from a question, says nothing
    about the user."""
    task = _TASK.match(holder)
    if task and holder.find(quote) >= task.end() - 1:
        return "quote is material the user asked to work on, not about the user"
    start = holder.find(quote)
    rest = holder[start + len(quote) :]
    end = re.search(r"[.!?。！？]", rest)
    if end and end.group(0) in "?？":
        return "quote is from a question, not a statement"
    return None


def one_word(text: str) -> str:
    text = " ".join(text.split())
    return repr(text[:40]) if text else "empty"


# ---- summaries ------------------------------------------------------------------------------


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def sensitive(text: str) -> bool:
    return bool(_HEALTH.search(text) or _SECRET.search(text)) or is_sensitive(None, "", text)


def prose(text: str) -> bool:
    """Words a person would write: no template or JSON debris (braces), some letters."""
    return "{" not in text and "}" not in text and any(ch.isalpha() for ch in text)


def check_summary(
    text: str, sources: Iterable[str], withheld: Iterable[str] = ()
) -> tuple[str | None, list[str]]:
    """The summary less its sentences on sensitive matters, stating ``withheld`` values (held
    for review) or not grounded in ``sources``; None when nothing is left, or when fewer than
    half of its grounded-or-not sentences hold up (then none of it is trusted)."""
    notes: list[str] = []
    if not prose(text):
        return None, ["summary is not prose"]
    held = [squash(w) for w in withheld if len(squash(w)) >= 3]
    vocab = Vocabulary(sources)
    kept, judged, invented = [], 0, []
    for sentence in sentences(text):
        if sensitive(sentence):
            notes.append("a sentence on a sensitive matter was left out")
            continue
        if any(h in squash(sentence) for h in held):
            notes.append("a sentence stating something held for review was left out")
            continue
        judged += 1
        share, missing = vocab.share(sentence)
        if share < SUMMARY_GROUNDED or any(any(ch.isdigit() for ch in w) for w in missing):
            invented += missing
        else:
            kept.append(sentence)
    if invented:
        notes.append(f"summary not grounded in the conversation ({', '.join(invented[:4])})")
    if not kept or 2 * len(kept) < judged:
        return None, notes
    return " ".join(kept), notes


def key_sentences(
    user_texts: Iterable[str], withheld: Iterable[str] = (), *, limit: int = 3, chars: int = 300
) -> str | None:
    """An extractive summary: the user's own most telling sentences (first person, most
    content), in the order said; none that is a question, sensitive or held for review."""
    held = [squash(w) for w in withheld if len(squash(w)) >= 3]
    scored: list[tuple[float, int, str]] = []
    for text in user_texts:
        for sentence in sentences(text):
            words = tokens(sentence)
            content = content_words(sentence)
            if len(words) < 4 or sentence.endswith("?") or not content:
                continue
            if _TASK.match(squash(sentence)):  # material to work on, not about the user
                continue
            if sensitive(sentence) or any(h in squash(sentence) for h in held):
                continue
            first = any(w in _FIRST_PERSON for w in words)
            scored.append((len(set(content)) + (3 if first else 0), len(scored), sentence))
    best = sorted(sorted(scored, reverse=True)[:limit], key=lambda s: s[1])
    out: list[str] = []
    for _, _, sentence in best:
        if sum(len(s) + 3 for s in out) + len(sentence) > chars:
            break
        out.append(sentence)
    if not out:
        return None
    return "The user said: " + " ".join(f"“{s}”" for s in out)


# ---- reflections ----------------------------------------------------------------------------

REFLECTION_CHARS = 300  # an insight is a sentence or two, whatever the model wrote
INSIGHT_WORDS = 5  # fewer is a label ("Wohnort", "Helix"), not an insight
# Words an insight uses to connect facts, which claim nothing of their own.
_LINKING = frozenset(
    """pattern patterns goal goals interest interests interested value values valued important
    importance matter matters priority priorities seem seems seemed appear appears tend tends
    focus focused focuses habit habits routine routines consistent consistently regular
    regularly both together suggest suggests suggesting show shows indicate indicates strong
    strongly clear clearly deep deeply combine combines combined connect connects connected
    related relates overall general generally passion passionate care cares balance across
    between several various aspects area areas life personal motivated committed dedicated
    invested engaged active actively enthusiast enthusiastic""".split()
)


@dataclass(frozen=True)
class CheckedInsight:
    """A reflection's insight after the checks: ``text`` to store (None: dropped), ``why`` it
    was dropped or waits for review, ``held``: it waits for the user's review."""

    text: str | None
    why: str | None = None
    held: bool = False


def clamp(text: str, chars: int) -> str:
    """``text`` in at most ``chars``: whole sentences while they fit, else the first one cut
    at a word, marked with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= chars:
        return text
    out = ""
    for sentence in sentences(text):
        if len(out) + len(sentence) + 1 > chars:
            break
        out = f"{out} {sentence}".strip()
    if out:
        return out
    return text[: chars - 1].rsplit(" ", 1)[0].rstrip(" ,;:") + "…"


def check_insight(text: str, facts: Sequence[tuple[str, bool]]) -> CheckedInsight:
    """An insight of a reflection, against the facts it was given as (text, sensitive)
    pairs: dropped unless it is a sentence whose content words all come from the facts
    (numbers exactly) and from at least two of them (the prompt asks for insights that
    connect facts: one that restates a single fact adds nothing); held for review when it
    touches a sensitive matter, in its own words or by drawing on a sensitive fact."""
    if not prose(text):
        return CheckedInsight(None, "not prose")
    text = clamp(text, REFLECTION_CHARS)
    if _SECRET.search(text):
        return CheckedInsight(None, "looks like a secret, never kept")
    if len(tokens(text)) < INSIGHT_WORDS:
        return CheckedInsight(None, "too short to be an insight")
    vocab = Vocabulary(t for t, _ in facts)
    said: list[str] = []
    for sentence in sentences(text):
        words = [w for w in content_words(sentence) if w not in _LINKING]
        missing = [w for w in words if not vocab.has(w)]
        share = 1.0 - len(missing) / len(words) if words else 1.0
        if share < SUMMARY_GROUNDED or any(any(ch.isdigit() for ch in w) for w in missing):
            return CheckedInsight(None, f"not grounded in the facts ({', '.join(missing[:4])})")
        said += words
    if not said:
        return CheckedInsight(None, "says nothing the facts say")
    drawn_on = sum(1 for t, _ in facts if any(Vocabulary([t]).has(w) for w in said))
    if drawn_on < min(2, len(facts)):
        return CheckedInsight(None, "restates one fact, connects none")
    private = Vocabulary(t for t, touchy in facts if touchy)
    plain = Vocabulary(t for t, touchy in facts if not touchy)
    if sensitive(text) or any(private.has(w) and not plain.has(w) for w in said):
        return CheckedInsight(text, "sensitive: waiting for your review", held=True)
    return CheckedInsight(text)
