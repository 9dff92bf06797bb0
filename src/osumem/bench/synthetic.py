"""The synthetic benchmark: seeded episodes with basis-vector embeddings.

Each episode has background steps and a few *semantic events*. Every factor value
(event, entity, tool action, subgoal) is a basis vector of R^d chosen at random per
episode (values may collide, as in any finite basis). A step's embedding is a weighted
sum of its factors' basis vectors plus isotropic Gaussian noise:

* event step: event .55, entity .20, tool .15, subgoal .10, noise σ = .55;
* background step: entity .35, tool .35, subgoal .30, noise σ = .45;
* query: event .70, entity .15, tool .10, subgoal .05, noise σ = .25.

σ is the per-coordinate standard deviation times ``noise_scale`` (our knob, see
docs/decisions.md). All steps of an event share its entity and subgoal; each event step
keeps the event's tool action except with probability ``random_tool_rate`` (then it
draws a random action); every tool signature appends a random argument-template suffix.
One query per event, asked at the end of the episode; its evidence is the event's
steps, and it is valid when it has at least ``min_evidence`` of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from osumem.evaluate.cells import cell_of, pairwise_share_action, pairwise_share_tool
from osumem.frozen import Constraints, FrozenConfig, IncreasingPair, Interval, Options, Weights
from osumem.types import Episode, MemoryView, Query

Weights4 = tuple[float, float, float, float]
Weights3 = tuple[float, float, float]


@dataclass(frozen=True, kw_only=True)
class SyntheticConfig(FrozenConfig):
    """Every knob of the synthetic generator. Paper values where the paper gives them;
    the others are ours (docs/decisions.md)."""

    config_name = "synthetic config"

    n_episodes: int = 200
    dim: int = 64
    min_steps: int = 150
    max_steps: int = 296
    #: events per episode, inclusive range (ours)
    events_per_episode: tuple[int, int] = (5, 9)
    #: steps per event, inclusive range (ours); events with < min_evidence give no query
    event_size: tuple[int, int] = (1, 3)
    #: an event's steps fall inside a window of this many steps (ours)
    event_span: int = 60
    #: how background steps get subgoal labels (ours): "iid" draws one per step from the
    #: pool, like entity and tool; "segments" labels contiguous runs (``subgoal_segment``)
    background_subgoals: str = "iid"
    #: background subgoal segment lengths, inclusive, for background_subgoals="segments"
    subgoal_segment: tuple[int, int] = (5, 15)
    entity_pool: int = 40
    tool_pool: int = 12
    subgoal_pool: int = 24
    #: argument-template suffixes per tool action (ours)
    arg_templates: int = 2
    random_tool_rate: float = 0.2
    #: event, entity, tool, subgoal
    event_weights: Weights4 = (0.55, 0.20, 0.15, 0.10)
    event_noise: float = 0.55
    #: entity, tool, subgoal
    background_weights: Weights3 = (0.35, 0.35, 0.30)
    background_noise: float = 0.45
    #: event, entity, tool, subgoal
    query_weights: Weights4 = (0.70, 0.15, 0.10, 0.05)
    query_noise: float = 0.25
    #: multiplies every σ (per coordinate); calibrated on development seeds (ours)
    noise_scale: float = 0.875
    cost_mean: float = 15.0
    cost_sd: float = 3.0
    cost_min: float = 5.0
    min_evidence: int = 2

    parameter_constraints: ClassVar[Constraints] = {
        "n_episodes": Interval(int, 1, None),
        "dim": Interval(int, 1, None),
        "min_steps": Interval(int, 1, None),
        "max_steps": Interval(int, 1, None),
        "events_per_episode": IncreasingPair(1),
        "event_size": IncreasingPair(1),
        "event_span": Interval(int, 1, None),
        "background_subgoals": Options(("iid", "segments")),
        "subgoal_segment": IncreasingPair(1),
        "entity_pool": Interval(int, 1, None),
        "tool_pool": Interval(int, 1, None),
        "subgoal_pool": Interval(int, 1, None),
        "arg_templates": Interval(int, 1, None),
        "random_tool_rate": Interval(float, 0, 1),
        "event_weights": Weights(4),
        "event_noise": Interval(float, 0, math.inf, closed="left"),
        "background_weights": Weights(3),
        "background_noise": Interval(float, 0, math.inf, closed="left"),
        "query_weights": Weights(4),
        "query_noise": Interval(float, 0, math.inf, closed="left"),
        "noise_scale": Interval(float, 0, math.inf, closed="left"),
        "cost_mean": Interval(float, None, None),
        "cost_sd": Interval(float, 0, None),
        "cost_min": Interval(float, 0, None, closed="neither"),
        "min_evidence": Interval(int, 1, None),
    }

    def _cross_check(self) -> list[str]:
        problems = []
        if self.min_steps > self.max_steps:
            problems.append(
                f"need 1 <= min_steps <= max_steps, got {self.min_steps}, {self.max_steps}"
            )
        if self.event_span < self.event_size[1]:
            problems.append("event_span must be at least the largest event_size")
        if self.event_span > self.min_steps:
            problems.append("event_span must not exceed min_steps")
        return problems


@dataclass
class _Factors:
    """Per-episode basis assignment of factor values."""

    entity: np.ndarray
    tool: np.ndarray
    subgoal: np.ndarray
    event: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))


def _basis(dim: int, idx: np.ndarray) -> np.ndarray:
    out = np.zeros((idx.shape[0], dim), dtype=np.float64)
    out[np.arange(idx.shape[0]), idx] = 1.0
    return out


def generate_episode(cfg: SyntheticConfig, seed: int, index: int) -> Episode:
    """Generate episode ``index`` of the benchmark for ``seed`` (independent streams)."""
    rng = np.random.default_rng([seed, index])
    d = cfg.dim
    n = int(rng.integers(cfg.min_steps, cfg.max_steps + 1))
    n_events = int(rng.integers(cfg.events_per_episode[0], cfg.events_per_episode[1] + 1))
    fac = _Factors(
        entity=rng.integers(0, d, cfg.entity_pool),
        tool=rng.integers(0, d, cfg.tool_pool),
        subgoal=rng.integers(0, d, cfg.subgoal_pool),
        event=rng.integers(0, d, n_events),
    )

    # Background annotations: entity, tool and subgoal per step (or subgoal segments).
    entity = rng.integers(0, cfg.entity_pool, n)
    tool = rng.integers(0, cfg.tool_pool, n)
    if cfg.background_subgoals == "segments":
        seg_lens = rng.integers(cfg.subgoal_segment[0], cfg.subgoal_segment[1] + 1, n)
        seg_of_step = np.repeat(np.arange(n), seg_lens)[:n]
        subgoal = rng.integers(0, cfg.subgoal_pool, n)[seg_of_step]
    else:
        subgoal = rng.integers(0, cfg.subgoal_pool, n)
    event = np.full(n, -1, dtype=np.int64)

    # Events: steps inside a window, sharing entity and subgoal; tool mostly shared.
    free = np.ones(n, dtype=bool)
    event_steps: list[np.ndarray] = []
    for e in range(n_events):
        size = int(rng.integers(cfg.event_size[0], cfg.event_size[1] + 1))
        start = int(rng.integers(0, n - cfg.event_span + 1))
        window = np.arange(start, start + cfg.event_span)
        window = window[free[window]]
        if window.size < size:
            event_steps.append(np.empty(0, dtype=np.int64))
            continue
        pos = np.sort(rng.choice(window, size=size, replace=False))
        free[pos] = False
        ev_entity = int(rng.integers(0, cfg.entity_pool))
        ev_subgoal = int(rng.integers(0, cfg.subgoal_pool))
        ev_tool = int(rng.integers(0, cfg.tool_pool))
        # The first (anchor) step carries the event's tool; each later step draws a
        # random action with probability random_tool_rate (docs/decisions.md).
        own_tool = rng.random(size) >= cfg.random_tool_rate
        own_tool[0] = True
        tool[pos] = np.where(own_tool, ev_tool, rng.integers(0, cfg.tool_pool, size))
        entity[pos] = ev_entity
        subgoal[pos] = ev_subgoal
        event[pos] = e
        event_steps.append(pos)
    template = rng.integers(0, cfg.arg_templates, n)

    # Embeddings.
    is_ev = event >= 0
    we, wn, wt, ws = cfg.event_weights
    bn, bt, bs = cfg.background_weights
    emb = np.zeros((n, d))
    emb += _basis(d, fac.entity[entity]) * np.where(is_ev, wn, bn)[:, None]
    emb += _basis(d, fac.tool[tool]) * np.where(is_ev, wt, bt)[:, None]
    emb += _basis(d, fac.subgoal[subgoal]) * np.where(is_ev, ws, bs)[:, None]
    if is_ev.any():
        emb[is_ev] += we * _basis(d, fac.event[event[is_ev]])
    sigma = np.where(is_ev, cfg.event_noise, cfg.background_noise) * cfg.noise_scale
    emb += rng.standard_normal((n, d)) * sigma[:, None]

    costs = np.maximum(np.rint(rng.normal(cfg.cost_mean, cfg.cost_sd, n)), cfg.cost_min)

    actions = [f"tool{k:02d}" for k in tool]
    view = MemoryView.build(
        emb,
        costs.astype(np.int64),
        tool_actions=actions,
        tool_signatures=[f"{a}#args{t}" for a, t in zip(actions, template, strict=True)],
        entities=[frozenset({f"ent{k:02d}"}) for k in entity],
        subgoals=[f"sg{k:02d}" for k in subgoal],
        sources=[f"syn{index:04d}"] * n,
        roles=["tool"] * n,
        texts=[
            f"{a} entity=ent{en:02d} subgoal=sg{sg:02d}"
            for a, en, sg in zip(actions, entity, subgoal, strict=True)
        ],
    )

    # Queries: one per event with enough evidence, asked at the end of the episode.
    qw = cfg.query_weights
    queries = []
    for e, pos in enumerate(event_steps):
        if pos.size < cfg.min_evidence:
            continue
        anchor = pos[0]
        q = (
            qw[0] * _basis(d, fac.event[[e]])[0]
            + qw[1] * _basis(d, fac.entity[[entity[anchor]]])[0]
            + qw[2] * _basis(d, fac.tool[[_event_tool(tool, pos)]])[0]
            + qw[3] * _basis(d, fac.subgoal[[subgoal[anchor]]])[0]
            + rng.standard_normal(d) * cfg.query_noise * cfg.noise_scale
        )
        evidence = tuple(int(p) for p in pos)
        queries.append(
            Query(
                qid=f"syn{index:04d}-q{e}",
                vector=q.astype(np.float32),
                t=n,
                evidence=evidence,
                cell=cell_of(view, evidence),
            )
        )
    return Episode(
        episode_id=f"syn{index:04d}",
        view=view,
        queries=tuple(queries),
        meta={
            "benchmark": "synthetic",
            "seed": seed,
            "index": index,
            # ground truth of the construction, for checks: the basis index of every
            # factor value and each step's event (-1: background)
            "basis": {
                "event": fac.event.tolist(),
                "entity": fac.entity.tolist(),
                "tool": fac.tool.tolist(),
                "subgoal": fac.subgoal.tolist(),
            },
            "event_of_step": event.tolist(),
        },
    )


def _event_tool(tool: np.ndarray, pos: np.ndarray) -> int:
    """The event's own tool: the most common action among its steps."""
    vals, counts = np.unique(tool[pos], return_counts=True)
    return int(vals[np.argmax(counts)])


def generate(cfg: SyntheticConfig, seed: int) -> Iterator[Episode]:
    """All ``cfg.n_episodes`` episodes for ``seed``, in order."""
    for i in range(cfg.n_episodes):
        yield generate_episode(cfg, seed, i)


def construction_stats(episodes: list[Episode]) -> dict[str, float]:
    """The benchmark's own construction statistics (the paper reports 197 / 907 /
    39.3% / 83.4%): valid episodes, queries, mean evidence, and the shares of queries
    whose evidence all shares one tool signature, or one tool action."""
    queries = [(ep, q) for ep in episodes for q in ep.queries]
    n_q = len(queries)
    sig = sum(pairwise_share_tool(ep.view, q.evidence) for ep, q in queries)
    act = sum(pairwise_share_action(ep.view, q.evidence) for ep, q in queries)
    return {
        "episodes": len(episodes),
        "episodes_with_queries": sum(1 for ep in episodes if ep.queries),
        "queries": n_q,
        "mean_evidence": float(np.mean([len(q.evidence) for _, q in queries])) if n_q else 0.0,
        "share_identical_signature": sig / n_q if n_q else 0.0,
        "share_same_action": act / n_q if n_q else 0.0,
        "mean_steps": float(np.mean([ep.view.n for ep in episodes])) if episodes else 0.0,
        "mean_cost": float(np.mean(np.concatenate([ep.view.costs for ep in episodes])))
        if episodes
        else 0.0,
    }
