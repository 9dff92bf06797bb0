"""Stage D augmentation (paper Appendix D): multi-burst copies of evidence.

Each focal evidence step of every query is replicated as ``copies`` scattered copies
that inherit its annotations (entities, tool action and signature, subgoal, source,
role, text, token cost), with small embedding noise: copy = ℓ2-normalise(h + ν·ε/√d),
ε ~ N(0, I_d), so ν = ``copy_noise`` is the expected norm of the perturbation (cosine to
the original ≈ 1 − ν²/2). Copies are inserted at uniformly random positions at least
``min_query_distance`` steps before the query time.

The query's new evidence (``evidence``):

* ``"anchor"`` (default): the anchor (the first evidence step with a tool signature and
  an entity, else the first) and its copies — all share its annotations, so every
  query is T+E+ (the paper's "lifts 100% of queries into T+E+");
* ``"all"``: every original evidence step and every copy.

The query vector is rebuilt from the new evidence with the benchmark's construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from osumem.bench.taubench import NOISE_MODES, QUERY_MODES, make_query
from osumem.frozen import Constraints, FrozenConfig, Interval, Options
from osumem.types import Episode, MemoryView, l2_normalise


@dataclass(frozen=True, kw_only=True)
class StageDConfig(FrozenConfig):
    """Stage D knobs; ``copies`` = 3 is the paper's, the rest are ours."""

    copies: int = 3
    copy_noise: float = 0.1
    evidence: str = "anchor"
    min_query_distance: int = 100
    query_mode: str = "noisy_mean"
    query_noise: float = 0.25
    #: "per_coordinate" or "norm" (osumem.bench.taubench.query_vector)
    query_noise_mode: str = "per_coordinate"

    config_name = "stage D"
    parameter_constraints: ClassVar[Constraints] = {
        "copies": Interval(int, 1, None),
        "copy_noise": Interval(float, 0, None),
        "evidence": Options(("anchor", "all")),
        "min_query_distance": Interval(int, 0, None),
        "query_mode": Options(QUERY_MODES),
        "query_noise": Interval(float, 0, None),
        "query_noise_mode": Options(NOISE_MODES),
    }


def _anchor(view: MemoryView, evidence: tuple[int, ...]) -> int:
    for e in evidence:
        if view.tool_signatures[e] and view.entities[e]:
            return e
    return evidence[0]


def stage_d(episode: Episode, cfg: StageDConfig, seed: int) -> Episode:
    """The Stage D augmentation of ``episode`` (see the module docstring); seeded."""
    rng = np.random.default_rng([seed, 4])
    view = episode.view
    n, d = view.n, view.dim
    src_rows = [np.arange(n)]
    keys = [np.arange(n, dtype=np.float64)]
    copy_of: list[tuple[int, int]] = []  # (query index, original position) per copy
    for qi, q in enumerate(episode.queries):
        hi = max(0, q.t - cfg.min_query_distance)
        for e in q.evidence:
            pos = rng.integers(0, hi + 1, cfg.copies)
            src_rows.append(np.full(cfg.copies, e))
            # a copy inserted "at p" goes just before original step p
            keys.append(pos - 0.5 + rng.random(cfg.copies) * 1e-3)
            copy_of.extend((qi, e) for _ in range(cfg.copies))
    rows = np.concatenate(src_rows)
    key = np.concatenate(keys)
    order = np.argsort(key, kind="stable")
    new_pos = np.empty_like(order)
    new_pos[order] = np.arange(order.shape[0])
    noisy = view.embeddings[rows].astype(np.float64)
    is_copy = np.arange(rows.shape[0]) >= n
    noise = rng.standard_normal((int(is_copy.sum()), d)) * (cfg.copy_noise / np.sqrt(d))
    noisy[is_copy] += noise
    emb = l2_normalise(noisy)
    new_view = view.take(rows[order]).with_embeddings(emb[order], normalise=False)
    queries = []
    for qi, q in enumerate(episode.queries):
        t_new = (
            int(np.searchsorted(np.sort(key), q.t - 0.5, side="right")) if q.t < n else new_view.n
        )
        copies = [int(new_pos[n + k]) for k, (cq, _) in enumerate(copy_of) if cq == qi]
        copy_src = [e for cq, e in copy_of if cq == qi]
        if cfg.evidence == "anchor":
            a = _anchor(view, q.evidence)
            ev = [int(new_pos[a])] + [c for c, s in zip(copies, copy_src, strict=True) if s == a]
        else:
            ev = [int(new_pos[e]) for e in q.evidence] + copies
        evidence = tuple(sorted(ev))
        queries.append(make_query(new_view, evidence, cfg, rng, qid=q.qid, t=t_new, text=q.text))
    meta: dict[str, Any] = {**episode.meta, "stage_d": True, "copies": cfg.copies}
    return Episode(episode_id=episode.episode_id, view=new_view, queries=tuple(queries), meta=meta)
