"""LoCoMo (Maharana et al., ACL 2024): very long conversations with natural-language
questions, each annotated with the dialogue turns that hold its answer.

The loader reads the original ``locomo10.json`` layout: a list of samples, each with
``sample_id``, ``conversation`` (``speaker_a``, ``speaker_b``, ``session_<n>`` lists of
turns with ``speaker``, ``dia_id``, ``text`` and sometimes ``blip_caption``, and
``session_<n>_date_time``) and ``qa`` (``question``, ``category`` 1-5, ``evidence``).

An episode is one conversation, ingested the way an agent's memory would see it:
every turn is one :meth:`osumem.memory.Memory.add_messages` call with one message,
speaker A's turns as ``user``, speaker B's as ``assistant``, the content the turn's
text with an image caption rendered as LoCoMo renders it (``<text> and shared
<caption>``), the speaker's name as the step's ``source`` and the session as its
subgoal (``session <n> (<date>)``). Embeddings and token costs are the memory's (the
encoder's tokenizer), so the returned steps are charged what an agent would pay.

Every question of the chosen categories is a query at the end of the conversation
(it sees every turn): its text is the question, its vector the encoder's embedding of
it, its evidence the positions of the turns its ``evidence`` ids name, its cell
``cat<k>`` (category 5 is adversarial; by default it is left out and reported apart).
Evidence ids are read leniently (:func:`parse_evidence`): several ids in one string
(``"D8:6; D9:17"``), zero-padded numbers (``D30:05``) and a stray separator
(``D:11:26``) all map to the turn they name; an id naming no turn is dropped and
counted, and a question left with no evidence is not asked (counted too).

``unit_costs`` makes every turn cost 1 token, so a budget is a number of turns: the
"top-k turns" reading of the LoCoMo paper's retrieval table.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from osumem.embed import Encoder
from osumem.errors import DataFileError
from osumem.frozen import Boolean, Constraints, FrozenConfig, Interval, Subset
from osumem.types import Episode, MemoryView, Query

#: LoCoMo's question categories (5 is adversarial: the answer is not in the dialogue).
CATEGORIES: tuple[int, ...] = (1, 2, 3, 4, 5)
CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_SESSION_RE = re.compile(r"session_(\d+)")
_ID_RE = re.compile(r"D\D*?(\d+)\D+(\d+)")


@dataclass(frozen=True, kw_only=True)
class LoCoMoConfig(FrozenConfig):
    """What a LoCoMo run reads.

    Attributes:
        samples: the conversations (``sample_id``) to use; empty: every one in the file.
        categories: the question categories asked (default 1-4; 5 is adversarial).
        unit_costs: every turn costs 1 token (budgets count turns).
        n_episodes: use at most this many of those conversations (None: all).
    """

    samples: tuple[str, ...] = ()
    categories: tuple[int, ...] = (1, 2, 3, 4)
    unit_costs: bool = False
    n_episodes: int | None = None

    config_name = "locomo config"
    parameter_constraints: ClassVar[Constraints] = {
        "categories": Subset(CATEGORIES),
        "unit_costs": Boolean(),
        "n_episodes": (Interval(int, 1, None), None),
    }

    def _cross_check(self) -> list[str]:
        return [] if self.categories else ["categories: give at least one category"]


def parse_evidence(raw: Any) -> tuple[list[tuple[int, int]], list[str]]:
    """The (session, turn) pairs an evidence field names, and the pieces that name
    none. ``raw`` is a list of id strings or one string; a string may hold several
    ids separated by ``;``, ``,`` or spaces; numbers may be zero-padded."""
    items = raw if isinstance(raw, list | tuple) else [raw]
    found: list[tuple[int, int]] = []
    bad: list[str] = []
    for item in items:
        for piece in re.split(r"[;,\s]+", str(item)):
            if not piece:
                continue
            m = _ID_RE.fullmatch(piece)
            if m is None:
                bad.append(piece)
            else:
                found.append((int(m.group(1)), int(m.group(2))))
    return found, bad


def render_turn(turn: Mapping[str, Any]) -> str:
    """A turn's message content as LoCoMo renders it: the text, then ``and shared
    <caption>`` for a turn that shares an image."""
    text = str(turn.get("text") or "")
    caption = turn.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        return f"{text} and shared {caption.strip()}".strip()
    return text


def load_samples(path: Path) -> list[dict[str, Any]]:
    """The samples of a LoCoMo file (``locomo10.json`` layout), checked for the keys
    the benchmark reads; :class:`DataFileError` naming the file and sample otherwise."""
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"LoCoMo data not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataFileError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(data, list) or not data:
        raise DataFileError(f"{path}: expected a list of LoCoMo samples")
    for i, s in enumerate(data):
        where = f"{path}[{i}]"
        if not isinstance(s, Mapping):
            raise DataFileError(f"{where}: a sample must be an object")
        for key in ("sample_id", "conversation", "qa"):
            if key not in s:
                raise DataFileError(f"{where}: sample has no {key!r}")
        conv = s["conversation"]
        if not isinstance(conv, Mapping) or "speaker_a" not in conv:
            raise DataFileError(f"{where}.conversation: no speaker_a")
        if not isinstance(s["qa"], list):
            raise DataFileError(f"{where}.qa: expected a list")
    return list(data)


def sessions(conversation: Mapping[str, Any]) -> list[tuple[int, str, list[Mapping[str, Any]]]]:
    """``(n, date, turns)`` of every session of a conversation, in session order."""
    out = []
    for key, turns in conversation.items():
        m = _SESSION_RE.fullmatch(key)
        if m and isinstance(turns, list):
            n = int(m.group(1))
            out.append((n, str(conversation.get(f"session_{n}_date_time", "")), turns))
    return sorted(out, key=lambda x: x[0])


@dataclass(frozen=True)
class Conversation:
    """One conversation ingested through the memory: its view, the position of every
    turn (by (session, turn) number) and the turns' ids as written."""

    sample_id: str
    view: MemoryView
    positions: dict[tuple[int, int], int]


def ingest(sample: Mapping[str, Any], encoder: Encoder) -> Conversation:
    """The conversation of ``sample`` added turn by turn to an in-memory
    :class:`~osumem.memory.Memory` (see the module docstring); its view."""
    from osumem.memory import Memory

    sid = str(sample["sample_id"])
    conv = sample["conversation"]
    speaker_a = conv.get("speaker_a")
    positions: dict[tuple[int, int], int] = {}
    with Memory.open(None, encoder=encoder, method="flat") as memory:
        n = 0
        for number, date, turns in sessions(conv):
            label = f"session {number} ({date})" if date else f"session {number}"
            for turn in turns:
                message = {
                    "role": "user" if turn.get("speaker") == speaker_a else "assistant",
                    "content": render_turn(turn),
                    "subgoal": label,
                }
                speaker = str(turn.get("speaker") or "") or None
                ids = memory.add_messages([message], namespace=sid, source=speaker)
                if ids:
                    found, _ = parse_evidence(turn.get("dia_id", ""))
                    if found:
                        positions.setdefault(found[0], n)
                    n += len(ids)
        view = memory.view(sid)
    return Conversation(sid, view, positions)


def turn_texts(sample: Mapping[str, Any]) -> list[str]:
    """The step texts the turns of ``sample`` become (to encode them in one batch)."""
    conv = sample["conversation"]
    out = []
    for _, _, turns in sessions(conv):
        for turn in turns:
            role = "user" if turn.get("speaker") == conv.get("speaker_a") else "assistant"
            content = render_turn(turn)
            if role == "user" or content.strip():
                out.append(f"{role}: {content}")
    return out


def build_episodes(
    samples: Sequence[Mapping[str, Any]], cfg: LoCoMoConfig, encoder: Encoder
) -> tuple[list[Episode], dict[str, Any]]:
    """One episode per conversation of ``cfg.samples`` (all when empty) with its
    questions of ``cfg.categories``; and the construction statistics."""
    chosen = [s for s in samples if not cfg.samples or str(s["sample_id"]) in cfg.samples]
    missing = sorted(set(cfg.samples) - {str(s["sample_id"]) for s in samples})
    if missing:
        raise DataFileError(f"LoCoMo: no conversation {missing} in the data")
    if cfg.n_episodes is not None:
        chosen = chosen[: cfg.n_episodes]
    # one batch per text kind, so a cached encoder sees each text once
    encoder.encode([t for s in chosen for t in turn_texts(s)])
    episodes = []
    stats: Counter[str] = Counter()
    per_cat: Counter[str] = Counter()
    unmapped: list[str] = []
    for s in chosen:
        conv = ingest(s, encoder)
        view = conv.view
        if cfg.unit_costs:
            view = MemoryView(**{**{c: getattr(view, c) for c in view.column_names()},
                                 "costs": np.ones(view.n, dtype=np.int64)})  # fmt: skip
        asked = [
            (i, qa) for i, qa in enumerate(s["qa"]) if int(qa.get("category", 0)) in cfg.categories
        ]
        vectors = encoder.encode([str(qa.get("question", "")) for _, qa in asked])
        queries = []
        for (i, qa), vec in zip(asked, vectors, strict=True):
            pairs, bad = parse_evidence(qa.get("evidence", []))
            unmapped += [f"{conv.sample_id}#{i}:{b}" for b in bad]
            ev = []
            for p in pairs:
                pos = conv.positions.get(p)
                if pos is None:
                    unmapped.append(f"{conv.sample_id}#{i}:D{p[0]}:{p[1]}")
                else:
                    ev.append(pos)
            evidence = tuple(sorted(set(ev)))
            stats["questions"] += 1
            if not evidence:
                stats["dropped_no_evidence"] += 1
                continue
            cat = int(qa["category"])
            per_cat[f"cat{cat}"] += 1
            queries.append(
                Query(
                    qid=f"{conv.sample_id}-q{i}",
                    vector=vec,
                    t=view.n,
                    evidence=evidence,
                    text=str(qa.get("question", "")),
                    cell=f"cat{cat}",
                )
            )
        stats["turns"] += view.n
        stats["evidence"] += sum(len(q.evidence) for q in queries)
        episodes.append(
            Episode(
                episode_id=conv.sample_id,
                view=view,
                queries=tuple(queries),
                meta={"benchmark": "locomo", "sample_id": conv.sample_id},
            )
        )
    n_q = sum(len(ep.queries) for ep in episodes)
    return episodes, {
        "conversations": len(episodes),
        "turns": stats["turns"],
        "questions": stats["questions"],
        "queries": n_q,
        "queries_per_category": dict(sorted(per_cat.items())),
        "dropped_no_evidence": stats["dropped_no_evidence"],
        "unmapped_evidence_ids": unmapped,
        "mean_evidence": stats["evidence"] / n_q if n_q else 0.0,
        "mean_cost": float(np.mean([ep.view.costs.mean() for ep in episodes])) if episodes else 0.0,
    }


def build_locomo(
    data: Path,
    cfg: LoCoMoConfig,
    *,
    encoder: str | Encoder = "sbert",
    cache: Path | None = None,
) -> tuple[list[tuple[int, Episode]], dict[str, Any]]:
    """``(seed, episode)`` pairs (seed 0: LoCoMo has no seeds) and construction
    statistics for ``cfg`` over the file ``data``. ``encoder``: ``"sbert"`` (cached
    on disk), ``"hashing"`` or an encoder object."""
    from osumem.embed import CachedEncoder, HashingEncoder, load_encoder

    samples = load_samples(data)
    enc: Encoder
    if isinstance(encoder, str):
        enc = HashingEncoder(384) if encoder == "hashing" else load_encoder(cache=cache or True)
    else:
        enc = encoder
    try:
        episodes, stats = build_episodes(samples, cfg, enc)
    finally:
        if isinstance(encoder, str) and isinstance(enc, CachedEncoder):
            enc.close()
    return [(0, ep) for ep in episodes], stats
