"""The tau-bench benchmark: trajectories concatenated into long episodes.

Each episode is built around one focal source (a trajectory with at least
``min_evidence`` matched ground-truth actions, focal sources taken in a seeded order)
plus filler trajectories drawn at random until the total length reaches a target drawn
uniformly in [``min_steps``, ``max_steps``], never above ``max_steps``. With
``exclude_same_task`` no two sources of an episode share a task (tau-bench has several
trials per task, near-duplicates of each other). The focal source sits at a random slot
such that every evidence step is at least ``min_query_distance`` steps before the query
time (the end of the episode, t = n).

Queries: every source of the episode with at least ``min_evidence`` evidence steps, all
at least ``min_query_distance`` steps before t, gives one query (its instruction is the
query text, its evidence re-offset to the episode's coordinates); the focal source
always, the others in a seeded random choice up to ``max_queries_per_episode`` in all.

Query vector (``query_mode``):

* ``"noisy_mean"``: ℓ2-normalise(m̂ + noise), m̂ the normalised mean of the evidence
  embeddings;
* ``"single_step"``: the same with one random evidence step in place of the mean
  (the paper's weaker construction).

Noise (``query_noise_mode``): ``"per_coordinate"`` (default) adds σ·ε, ε ~ N(0, I_d),
σ = ``query_noise`` = .25 per coordinate (the synthetic benchmark's reading; at 384-d
its norm is ≈ σ√d ≈ 4.9, so the query keeps little of m̂); ``"norm"`` adds σ·ε/√d,
a perturbation of expected norm σ.

Step texts: each tool response is cut to ``max_observation_chars`` characters (0 by
default: a tool-call step is the call alone; ``None`` keeps the response whole), so an
evidence step costs tens of tokens as the paper's budgets imply (docs/decisions.md:
the paper's non-zero Hit@2 differences at B = 64 need two evidence steps in 64 tokens). Namespace prefixing of entities and tool signatures is on by default
(``prefix_namespace``); turning it off reproduces the paper's pitfall.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from osumem.embed import Encoder
from osumem.errors import ConfigError
from osumem.evaluate.cells import cell_of
from osumem.frozen import Boolean, Constraints, FrozenConfig, Interval, Options
from osumem.ingest.openai_chat import steps_to_view
from osumem.ingest.taubench import TauSource
from osumem.types import Episode, MemoryView, Query, l2_normalise

QUERY_MODES: tuple[str, ...] = ("noisy_mean", "single_step")
NOISE_MODES: tuple[str, ...] = ("per_coordinate", "norm")


@dataclass(frozen=True, kw_only=True)
class TauBenchConfig(FrozenConfig):
    """Every knob of the tau-bench construction (paper values where given)."""

    config_name = "taubench config"

    n_episodes: int = 125
    min_steps: int = 150
    max_steps: int = 300
    #: a focal source needs at least this many matched evidence steps (Hit@2 needs 2)
    min_evidence: int = 2
    #: every evidence step of a query lies at least this many steps before it (ours)
    min_query_distance: int = 100
    #: queries per episode at most: the focal source's plus other eligible sources (ours)
    max_queries_per_episode: int = 3
    query_mode: str = "noisy_mean"
    #: σ of the Gaussian noise added to the query direction
    query_noise: float = 0.25
    #: "per_coordinate" (σ per coordinate) or "norm" (σ = expected norm of the noise)
    query_noise_mode: str = "per_coordinate"
    prefix_namespace: bool = True
    #: "relaxed" or "exact" ground-truth action matching (osumem.ingest.taubench)
    match: str = "relaxed"
    #: no two sources of an episode share a task (other trials of it)
    exclude_same_task: bool = True
    #: tool responses in step texts are cut to this many characters (None: whole;
    #: default 0, the call alone; 200 is the sensitivity variant)
    max_observation_chars: int | None = 0

    parameter_constraints: ClassVar[Constraints] = {
        "n_episodes": Interval(int, 1, None),
        "min_steps": Interval(int, 1, None),
        "max_steps": Interval(int, 1, None),
        "min_evidence": Interval(int, 1, None),
        "min_query_distance": Interval(int, 0, None),
        "max_queries_per_episode": Interval(int, 1, None),
        "query_mode": Options(QUERY_MODES),
        "query_noise": Interval(float, 0, None),
        "query_noise_mode": Options(NOISE_MODES),
        "prefix_namespace": Boolean(),
        "match": Options(("exact", "relaxed")),
        "exclude_same_task": Boolean(),
        "max_observation_chars": (Interval(int, 0, None), None),
    }

    def _cross_check(self) -> list[str]:
        if self.min_steps > self.max_steps:
            return [f"need 1 <= min_steps <= max_steps, got {self.min_steps}, {self.max_steps}"]
        return []


def query_vector(
    embeddings: NDArray[np.float32],
    evidence: Sequence[int],
    *,
    mode: str,
    noise: float,
    rng: np.random.Generator,
    noise_mode: str = "per_coordinate",
) -> NDArray[np.float32]:
    """A query direction built from evidence embeddings (see the module docstring)."""
    if noise_mode not in NOISE_MODES:
        raise ConfigError(f"query noise mode must be one of {NOISE_MODES}, got {noise_mode!r}")
    ev = np.asarray(evidence, dtype=np.int64)
    if mode == "noisy_mean":
        base = embeddings[ev].mean(axis=0)
    elif mode == "single_step":
        base = embeddings[int(rng.choice(ev))]
    else:
        raise ConfigError(f"query mode must be one of {QUERY_MODES}, got {mode!r}")
    base = l2_normalise(base)[0].astype(np.float64)
    scale = noise if noise_mode == "per_coordinate" else noise / np.sqrt(base.shape[0])
    q = base + scale * rng.standard_normal(base.shape[0])
    return l2_normalise(q)[0]


def make_query(
    view: MemoryView,
    evidence: tuple[int, ...],
    cfg: Any,
    rng: np.random.Generator,
    *,
    qid: str,
    t: int,
    text: str,
) -> Query:
    """The query over ``evidence`` of ``view``: its vector (:func:`query_vector` with the
    ``query_mode``, ``query_noise`` and ``query_noise_mode`` of ``cfg``) and its cell."""
    vec = query_vector(
        view.embeddings,
        evidence,
        mode=cfg.query_mode,
        noise=cfg.query_noise,
        rng=rng,
        noise_mode=cfg.query_noise_mode,
    )
    return Query(
        qid=qid, vector=vec, t=t, evidence=evidence, text=text, cell=cell_of(view, evidence)
    )


def source_views(sources: Sequence[TauSource], encoder: Encoder) -> list[MemoryView]:
    """Each source's view (embeddings and token costs from ``encoder``), encoding every
    text in one batch so a cached encoder sees it once."""
    all_steps = [s for src in sources for s in src.steps]
    whole = steps_to_view(all_steps, encoder)
    out, start = [], 0
    for src in sources:
        end = start + len(src.steps)
        out.append(whole.take(np.arange(start, end)))
        start = end
    return out


def build_episode(
    sources: Sequence[TauSource],
    views: Sequence[MemoryView],
    focal: int,
    cfg: TauBenchConfig,
    rng: np.random.Generator,
    episode_id: str,
) -> Episode:
    """One concatenated episode around source ``focal`` with its queries (see the
    module docstring)."""
    fsrc = sources[focal]
    target = int(rng.integers(cfg.min_steps, cfg.max_steps + 1))
    total = len(fsrc.steps)
    fillers: list[int] = []
    tasks = {fsrc.task_id}
    for i in rng.permutation(len(sources)):
        if total >= target:
            break
        i = int(i)
        src = sources[i]
        if i == focal or not src.steps or (cfg.exclude_same_task and src.task_id in tasks):
            continue
        if total + len(src.steps) <= cfg.max_steps:
            fillers.append(i)
            tasks.add(src.task_id)
            total += len(src.steps)
    n = total
    last_ev = max(fsrc.evidence)
    offsets = np.concatenate([[0], np.cumsum([len(sources[i].steps) for i in fillers])])
    valid = [k for k, off in enumerate(offsets) if n - (off + last_ev) >= cfg.min_query_distance]
    slot = int(rng.choice(valid)) if valid else 0
    order = [*fillers[:slot], focal, *fillers[slot:]]
    view = MemoryView.concat([views[i] for i in order])
    starts = np.concatenate([[0], np.cumsum([len(sources[i].steps) for i in order])])
    eligible = [
        k
        for k, i in enumerate(order)
        if i != focal
        and len(sources[i].evidence) >= cfg.min_evidence
        and n - (starts[k] + max(sources[i].evidence)) >= cfg.min_query_distance
    ]
    extra: list[int] = (
        [int(k) for k in rng.permutation(eligible)[: cfg.max_queries_per_episode - 1]]
        if eligible
        else []
    )
    chosen = sorted([slot, *extra])
    queries = []
    for k in chosen:
        src = sources[order[k]]
        evidence = tuple(int(starts[k]) + e for e in src.evidence)
        queries.append(
            make_query(
                view,
                evidence,
                cfg,
                rng,
                qid=f"{episode_id}-{src.source}",
                t=n,
                text=src.instruction,
            )
        )
    return Episode(
        episode_id=episode_id,
        view=view,
        queries=tuple(queries),
        meta={
            "benchmark": "taubench",
            "focal": fsrc.source,
            "sources": [sources[i].source for i in order],
            "queried": [sources[order[k]].source for k in chosen],
            "distance_ok": bool(valid),
        },
    )


def generate(
    sources: Sequence[TauSource],
    views: Sequence[MemoryView],
    cfg: TauBenchConfig,
    seed: int,
) -> list[Episode]:
    """``cfg.n_episodes`` episodes for ``seed``. Focal sources are the trajectories with
    at least ``min_evidence`` evidence steps, taken in a seeded random order and reused
    cyclically when there are fewer of them than episodes."""
    focal = [i for i, s in enumerate(sources) if len(s.evidence) >= cfg.min_evidence]
    if not focal:
        raise ConfigError(f"taubench: no trajectory has >= {cfg.min_evidence} evidence steps")
    order = np.random.default_rng([seed, 7]).permutation(focal)
    return [
        build_episode(
            sources,
            views,
            int(order[k % len(order)]),
            cfg,
            np.random.default_rng([seed, k]),
            f"tau{k:04d}",
        )
        for k in range(cfg.n_episodes)
    ]


def cross_source_sharing(view: MemoryView) -> dict[str, int]:
    """Count the step pairs of ``view`` from different sources and how many
    of them share an entity string, an identical non-empty tool signature, or either.

    With namespace prefixing on, annotations of different sources never coincide, so
    every count but ``pairs`` is 0; with it off, generic strings (a cabin class, a
    count, a tool template) link unrelated tasks. Vectorised over the
    step × annotation incidence matrix.
    """
    n = view.n
    ent_ids: dict[str, int] = {}
    rows, cols = [], []
    for i, ents in enumerate(view.entities):
        for e in ents:
            rows.append(i)
            cols.append(ent_ids.setdefault(e, len(ent_ids)))
    inc = np.zeros((n, max(len(ent_ids), 1)), dtype=np.float32)
    inc[rows, cols] = 1.0
    share_ent = (inc @ inc.T) > 0
    sig = view.tool_signatures.astype(str)
    share_sig = (sig[:, None] == sig[None, :]) & (sig != "")[:, None]
    src = view.sources.astype(str)
    upper = np.triu(src[:, None] != src[None, :], k=1)
    return {
        "pairs": int(upper.sum()),
        "entity": int((upper & share_ent).sum()),
        "signature": int((upper & share_sig).sum()),
        "either": int((upper & (share_ent | share_sig)).sum()),
    }


def sharing_rates(episodes: Sequence[Episode]) -> dict[str, float]:
    """Pooled share of cross-source step pairs that share an entity, a tool signature,
    or either, over ``episodes`` (see :func:`cross_source_sharing`)."""
    tot = {"pairs": 0, "entity": 0, "signature": 0, "either": 0}
    for ep in episodes:
        for k, v in cross_source_sharing(ep.view).items():
            tot[k] += v
    pairs = max(tot["pairs"], 1)
    return {k: tot[k] / pairs for k in ("entity", "signature", "either")}


def construction_stats(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Episode and query counts, cell sizes, mean evidence, episode lengths and the
    cross-source sharing rates (:func:`sharing_rates`)."""
    qs = [q for ep in episodes for q in ep.queries]
    cells: dict[str, int] = {c: 0 for c in ("T+E+", "T+E-", "T-E+", "T-E-")}
    for q in qs:
        cells[q.cell] = cells.get(q.cell, 0) + 1
    lengths = [ep.view.n for ep in episodes]
    return {
        "episodes": len(episodes),
        "queries": len(qs),
        "mean_evidence": float(np.mean([len(q.evidence) for q in qs])) if qs else 0.0,
        "cells": cells,
        "share_T+E+": cells["T+E+"] / len(qs) if qs else 0.0,
        "min_steps": int(min(lengths)) if lengths else 0,
        "max_steps": int(max(lengths)) if lengths else 0,
        "mean_steps": float(np.mean(lengths)) if lengths else 0.0,
        "min_evidence_distance": int(min(q.t - max(q.evidence) for q in qs)) if qs else 0,
        "unique_focal": len({ep.meta.get("focal") for ep in episodes}),
        "unique_query_sources": len({q.qid.split("-", 1)[1] for q in qs}),
        "cross_source_sharing": sharing_rates(episodes),
    }
