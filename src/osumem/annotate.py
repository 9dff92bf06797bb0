"""Annotation extraction for real trajectories: entities, tool signatures,
source prefixes (the paper's namespace prefixing)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from osumem.types import DEFAULT_BOILERPLATE

MIN_ENTITY_LEN = 2
MAX_ENTITY_LEN = 80


#: The English stop words of the Glasgow Information Retrieval Group, as scikit-learn
#: ships them (``sklearn.feature_extraction.text.ENGLISH_STOP_WORDS``; a test checks
#: this copy against it, so importing scikit-learn is not needed at query time).
_STOP_WORDS_TEXT = """a about above across after afterwards again against all almost alone along
    already also although always am among amongst amoungst amount an and another any
    anyhow anyone anything anyway anywhere are around as at back be became because
    become becomes becoming been before beforehand behind being below beside besides
    between beyond bill both bottom but by call can cannot cant co con could couldnt
    cry de describe detail do done down due during each eg eight either eleven else
    elsewhere empty enough etc even ever every everyone everything everywhere except
    few fifteen fifty fill find fire first five for former formerly forty found four
    from front full further get give go had has hasnt have he hence her here hereafter
    hereby herein hereupon hers herself him himself his how however hundred i ie if in
    inc indeed interest into is it its itself keep last latter latterly least less ltd
    made many may me meanwhile might mill mine more moreover most mostly move much must
    my myself name namely neither never nevertheless next nine no nobody none noone nor
    not nothing now nowhere of off often on once one only onto or other others
    otherwise our ours ourselves out over own part per perhaps please put rather re
    same see seem seemed seeming seems serious several she should show side since
    sincere six sixty so some somehow someone something sometime sometimes somewhere
    still such system take ten than that the their them themselves then thence there
    thereafter thereby therefore therein thereupon these they thick thin third this
    those though three through throughout thru thus to together too top toward towards
    twelve twenty two un under until up upon us very via was we well were what
    whatever when whence whenever where whereafter whereas whereby wherein whereupon
    wherever whether which while whither who whoever whole whom whose why will with
    within without would yet you your yours yourself yourselves"""
ENGLISH_STOP_WORDS: frozenset[str] = frozenset(_STOP_WORDS_TEXT.split())


def _walk(value: Any) -> Iterator[str]:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, str):
        s = value.strip()
        if MIN_ENTITY_LEN <= len(s) <= MAX_ENTITY_LEN:
            yield s
    elif isinstance(value, int | float):
        if value == value and value not in (float("inf"), float("-inf")):
            yield str(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            yield from _walk(v)


def extract_entities(arguments: Any) -> frozenset[str]:
    """Entities of a tool call's argument dict, walked recursively: string values of
    length 2 to 80 (stripped) and numeric values as strings. Booleans and None are
    not entities; keys are not entities."""
    return frozenset(_walk(arguments))


def tool_signature(
    action: str,
    arguments: Mapping[str, Any] | None,
    boilerplate: Iterable[str] = DEFAULT_BOILERPLATE,
) -> str:
    """``action(sorted,argument,keys)``; empty for no action or a boilerplate tool
    (matched case-insensitively)."""
    if not action:
        return ""
    if action.lower() in {b.lower() for b in boilerplate}:
        return ""
    keys = ",".join(sorted(arguments or {}))
    return f"{action}({keys})"


def prefix(source: str, value: str) -> str:
    """Prefix an entity or signature with its step's source (``source::value``; the
    paper's namespace prefixing); empty stays empty."""
    if not value or not source:
        return value
    return f"{source}::{value}"


def prefix_entities(source: str, entities: Iterable[str]) -> frozenset[str]:
    """Prefix every entity with the source (see :func:`prefix`)."""
    return frozenset(prefix(source, e) for e in entities)


# --- entities from text ---------------------------------------------------------------

_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_UNITS = (
    "%|percent|kg|kgs|g|mg|lb|lbs|pounds?|oz|km|kms|m|cm|mm|mi|miles?|ft|feet|foot|inch|inches"
    "|l|ml|liters?|litres?|gallons?|mph|kph|km/h|°c|°f|degrees?|usd|eur|gbp|dollars?|euros?"
    "|bucks|cents?|years?|yrs?|months?|weeks?|days?|hours?|hrs?|minutes?|mins?|seconds?|secs?"
    "|am|pm|gb|mb|kb|tb|ghz|mhz|k"
)
_EMAIL_RE = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL_RE = re.compile(r"https?://\S+|www\.\S+")
_DATE_RES = (
    re.compile(r"\b\d{4}-\d{1,2}-\d{1,2}\b"),
    re.compile(r"\b\d{1,2}/\d{1,2}/\d{2,4}\b"),
    re.compile(
        rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\.?,?(?:\s+\d{{4}})?\b", re.I
    ),
    re.compile(rf"\b(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?\b", re.I),
    re.compile(rf"\b(?:{_MONTHS})\s+\d{{4}}\b", re.I),
    re.compile(r"\b(?:1[89]|20)\d{2}\b"),
)
_QUANTITY_RE = re.compile(
    rf"(?:[$€£]\s?\d[\d,]*(?:\.\d+)?(?:\s?(?:k|m|bn|million|billion))?)"
    rf"|(?:\b\d[\d,]*(?:\.\d+)?\s?(?:{_UNITS})(?![\w]))",
    re.I,
)
#: Codes and ids: a token with letters and digits (``HAT123``, ``R1001``,
#: ``mia_li_3668``, ``ABC-12``), or a capitalised acronym of 2-6 letters (``JFK``).
_CODE_RE = re.compile(r"\b(?=[\w-]*[A-Za-z])(?=[\w-]*\d)[A-Za-z0-9][\w-]{2,}\b|\b[A-Z]{2,6}\b")
#: Word tokens (any script) with their positions, for the proper-name scan.
_WORD_RE = re.compile(r"[^\W\d_][\w'’-]*")
_CONNECTORS = frozenset({"of", "de", "la", "del", "the", "von", "van", "da", "di"})
#: Capitalised words that start sentences and name nothing.
_NOT_NAMES_TEXT = """yes yeah yep no nope ok okay oh wow hey hi hello thanks thank sure great well so
    good nice cool awesome sorry please congrats congratulations haha lol hmm ah aw
    definitely absolutely totally really actually anyway also let lets let's i'm i've
    i'll i'd that's it's what's there's here's don't can't didn't won't isn't
    yesterday today tomorrow tonight last next this these those that it its my our your
    his her their we you they he she i me us them just maybe guess glad happy exactly
    true right love like thanks! user assistant call result"""
_NOT_NAMES = frozenset(_NOT_NAMES_TEXT.split())
_WEEKDAYS = frozenset(
    ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
)
_MONTH_NAMES = frozenset(_MONTHS.split("|"))


def _clean(value: str) -> str:
    return " ".join(value.replace(",", " ").split()).casefold()


def extract_text_entities(text: str) -> frozenset[str]:
    """Entities of a free text, the strings people and tools say: e-mail addresses,
    URLs, dates, numbers with units or currency, codes and ids, and proper names
    (runs of capitalised words; a sentence's first word only when it is not a common
    word). Offline, deterministic rules; values are case folded with whitespace
    collapsed (``"8 May, 2023"`` → ``"8 may 2023"``), between
    :data:`MIN_ENTITY_LEN` and :data:`MAX_ENTITY_LEN` characters."""
    if not text or not text.strip():
        return frozenset()
    found: list[str] = []
    rest = text
    for rx in (_EMAIL_RE, _URL_RE):
        found += rx.findall(rest)
        rest = rx.sub(" ", rest)
    for rx in _DATE_RES:
        found += rx.findall(rest)
    found += _QUANTITY_RE.findall(rest)
    found += _CODE_RE.findall(rest)
    found += _names(rest)
    out = set()
    for value in found:
        v = _clean(value)
        if MIN_ENTITY_LEN <= len(v) <= MAX_ENTITY_LEN and v not in _NOT_NAMES:
            out.add(v)
    return frozenset(out)


def _is_cap(word: str) -> bool:
    return word[0].isupper() and any(c.islower() for c in word)


def _names(text: str) -> list[str]:
    """Runs of capitalised words (any script with case), joined by a connector word
    inside (``Bank of America``). A run's first word is dropped when it is a common
    word (a capitalised sentence start: ``Yesterday``, ``The``) or a month or weekday
    name; a run left empty is no name."""
    words = [(m.group(0).rstrip("'’-"), m.start(), m.end()) for m in _WORD_RE.finditer(text)]
    out: list[str] = []
    i = 0
    while i < len(words):
        if not _is_cap(words[i][0]):
            i += 1
            continue
        run = [words[i][0]]
        j = i + 1
        while j < len(words):
            gap = text[words[j - 1][2] : words[j][1]]
            if gap.strip():  # punctuation between: the run ends
                break
            w = words[j][0]
            if _is_cap(w):
                run.append(w)
                j += 1
            elif (
                w in _CONNECTORS
                and j + 1 < len(words)
                and _is_cap(words[j + 1][0])
                and not text[words[j][2] : words[j + 1][1]].strip()
            ):
                run += [w, words[j + 1][0]]
                j += 2
            else:
                break
        while run and (_common(run[0]) or run[0] in _CONNECTORS):
            run = run[1:]
        while run and (_common(run[-1]) or run[-1] in _CONNECTORS):
            run = run[:-1]
        if run:
            out.append(" ".join(run))
        i = j
    return out


def _common(word: str) -> bool:
    w = word.casefold()
    return w in _NOT_NAMES or w in ENGLISH_STOP_WORDS or w in _WEEKDAYS or w in _MONTH_NAMES
