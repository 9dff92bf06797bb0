"""The ToolBench planted-evidence probe.

Per episode: a target trajectory with at least ``k`` tool calls (``k`` =
``evidence_size``); ``k`` of its non-boilerplate tool calls are the evidence. The
background has ``background_size`` steps: ``confounder_share`` of them drawn from the
steps of the ``n_neighbors`` trajectories whose queries are nearest the target's (SBERT
cosine), the rest drawn from the other ("unrelated") trajectories. The background is
shuffled and the evidence is placed at ``k`` evenly spaced positions
``floor((i + 1) · n / (k + 1))``, ``i = 0..k-1`` of the ``n = background_size + k``
steps. One query per episode: the target's query text embedded verbatim, asked at the
end of the episode (``t = n``).

A confounder pool (30 trajectories of ~5 steps) is smaller than the ~375 confounders
wanted, so confounders are drawn by *balanced replication*: the pool is shuffled and
repeated until enough steps are drawn, so every pool step appears ⌊r⌋ or ⌈r⌉ times.
Unrelated steps are drawn without replacement. Every step keeps its source trajectory
as source. Entities and tool signatures are *not* prefixed by default, so a
confounder calling the evidence's API (or passing the same argument value) shares its
tool (entity) OSU, as in the paper's probe; ``namespace_prefix=True`` prefixes them
with the source trajectory (the tau-bench concatenation rule), so strings never
bridge trajectories (a sensitivity setting here).

Every distinct step text and every query is embedded once (:func:`build_corpus`);
episodes only index into those vectors.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from osumem.annotate import prefix, prefix_entities
from osumem.embed import Encoder, load_encoder
from osumem.errors import ConfigError
from osumem.evaluate.cells import cell_of, pairwise_share_entity, pairwise_share_tool
from osumem.frozen import Boolean, Constraints, FrozenConfig, Interval, Options, Subset
from osumem.ingest.toolbench import ToolBenchRecord, ToolBenchStep, read_toolbench
from osumem.types import Episode, MemoryView, Query


@dataclass(frozen=True, kw_only=True)
class ToolBenchConfig(FrozenConfig):
    """Every knob of the probe. Paper values where the paper gives them (200 episodes,
    k = 3, ~500 steps, 75% confounders, 30 neighbours); the rest are ours."""

    config_name = "toolbench config"

    n_episodes: int = 200
    #: k, evidence steps per episode (paper sweeps {2, 3, 4}; primary 3)
    evidence_size: int = 3
    background_size: int = 500
    confounder_share: float = 0.75
    n_neighbors: int = 30
    #: which step roles enter the pool (ours: tool calls and assistant text)
    step_roles: tuple[str, ...] = ("tool", "assistant")
    #: prefix entities and tool signatures with the source trajectory. Off by default:
    #: The paper prescribes prefixing for the tau-bench concatenation only, and the
    #: paper's ToolBench membership (2.16 vs .87, 13.2% evicted) needs evidence to
    #: share OSUs with confounders of the same API (docs/decisions.md). True is kept
    #: as a sensitivity setting.
    namespace_prefix: bool = False
    #: tool signature granularity passed to the reader: "api" (the paper's reading:
    #: ``<fname>_for_<api>`` share the API) or "function" (ours: name + declared keys)
    signature_level: str = "api"

    parameter_constraints: ClassVar[Constraints] = {
        "n_episodes": Interval(int, 1, None),
        "evidence_size": Interval(int, 1, None),
        "background_size": Interval(int, 1, None),
        "confounder_share": Interval(float, 0, 1),
        "n_neighbors": Interval(int, 1, None),
        "step_roles": Subset(("tool", "assistant")),
        "namespace_prefix": Boolean(),
        "signature_level": Options(("api", "function")),
    }


@dataclass(frozen=True, eq=False)
class ToolBenchCorpus:
    """Parsed records with every pool step and query embedded once.

    Attributes:
        records: the parsed records.
        steps: pool steps (roles in ``step_roles``), record by record.
        step_record: ``(m,)`` record index of each pool step.
        step_embeddings: ``(m, d)`` float32 unit rows.
        step_costs: ``(m,)`` int64 token counts (the encoder's tokenizer).
        query_embeddings: ``(r, d)`` float32 unit rows, one per record.
        neighbors: ``(r, n_neighbors)`` record indices by descending query cosine
            (the record itself and records with an identical query excluded).
        evidence_candidates: per record, pool indices of its non-boilerplate tool calls.
    """

    records: tuple[ToolBenchRecord, ...]
    steps: tuple[ToolBenchStep, ...]
    step_record: NDArray[np.int64]
    step_embeddings: NDArray[np.float32]
    step_costs: NDArray[np.int64]
    query_embeddings: NDArray[np.float32]
    neighbors: NDArray[np.int64]
    evidence_candidates: tuple[NDArray[np.int64], ...]
    same_query: tuple[NDArray[np.int64], ...]


def _encode_unique(encoder: Encoder, texts: Sequence[str]) -> NDArray[np.float32]:
    uniq = list(dict.fromkeys(texts))
    index = {t: i for i, t in enumerate(uniq)}
    vecs = np.asarray(encoder.encode(uniq), dtype=np.float32)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs = (vecs / np.where(norms > 0, norms, 1.0)).astype(np.float32)
    return vecs[np.fromiter((index[t] for t in texts), dtype=np.int64, count=len(texts))]


def build_corpus(
    records: Sequence[ToolBenchRecord],
    encoder: Encoder,
    *,
    step_roles: Sequence[str] = ("tool", "assistant"),
    n_neighbors: int = 30,
) -> ToolBenchCorpus:
    """Embed every distinct pool-step text and query once and find each record's
    ``n_neighbors`` nearest-query records (cosine of the query embeddings)."""
    if len(records) < 2:
        raise ConfigError(f"toolbench: need at least 2 records, got {len(records)}")
    roles = set(step_roles)
    steps: list[ToolBenchStep] = []
    owner: list[int] = []
    candidates: list[NDArray[np.int64]] = []
    for r, rec in enumerate(records):
        mine = []
        for s in rec.steps:
            if s.role not in roles:
                continue
            if s.role == "tool" and not s.is_boilerplate:
                mine.append(len(steps))
            steps.append(s)
            owner.append(r)
        candidates.append(np.asarray(mine, dtype=np.int64))
    texts = [s.text for s in steps]
    step_emb = _encode_unique(encoder, texts)
    costs = np.asarray(encoder.count_tokens(texts), dtype=np.int64).clip(min=1)
    queries = [rec.query for rec in records]
    q_emb = _encode_unique(encoder, queries)
    sim = q_emb @ q_emb.T
    qarr = np.asarray(queries, dtype=object)
    same = qarr[:, None] == qarr[None, :]
    sim[same] = -np.inf  # self and duplicated queries are never neighbours
    k = min(n_neighbors, len(records) - 1)
    order = np.argsort(-sim, axis=1, kind="stable")[:, :k]
    same_query = tuple(np.flatnonzero(row).astype(np.int64) for row in same)
    return ToolBenchCorpus(
        records=tuple(records),
        steps=tuple(steps),
        step_record=np.asarray(owner, dtype=np.int64),
        step_embeddings=step_emb,
        step_costs=costs,
        query_embeddings=q_emb,
        neighbors=order.astype(np.int64),
        evidence_candidates=tuple(candidates),
        same_query=same_query,
    )


def _balanced_draw(pool: NDArray[np.int64], n: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """``n`` items from ``pool``: shuffled copies of the pool, concatenated, cut at n."""
    if n <= 0 or pool.size == 0:
        return np.empty(0, dtype=np.int64)
    reps = -(-n // pool.size)
    return np.concatenate([rng.permutation(pool) for _ in range(reps)])[:n]


def evidence_positions(n: int, k: int) -> NDArray[np.int64]:
    """``k`` evenly spaced positions in ``0..n-1``: ``floor((i + 1) · n / (k + 1))``."""
    return (np.arange(1, k + 1, dtype=np.int64) * n) // (k + 1)


def eligible_targets(corpus: ToolBenchCorpus, k: int) -> NDArray[np.int64]:
    """Records with at least ``k`` non-boilerplate tool calls."""
    return np.asarray(
        [r for r, c in enumerate(corpus.evidence_candidates) if c.size >= k], dtype=np.int64
    )


def build_episode(
    corpus: ToolBenchCorpus,
    cfg: ToolBenchConfig,
    target: int,
    rng: np.random.Generator,
    *,
    episode_id: str,
) -> Episode:
    """One probe episode for record ``target`` (see the module docstring)."""
    k = cfg.evidence_size
    cands = corpus.evidence_candidates[target]
    if cands.size < k:
        raise ConfigError(
            f"toolbench: record {corpus.records[target].source} has {cands.size} tool "
            f"calls, fewer than evidence_size={k}"
        )
    evidence = np.sort(rng.choice(cands, size=k, replace=False))
    neigh = corpus.neighbors[target]
    excluded = np.zeros(len(corpus.records), dtype=bool)
    excluded[neigh] = True
    excluded[corpus.same_query[target]] = True
    in_neigh = np.isin(corpus.step_record, neigh)
    conf_pool = np.flatnonzero(in_neigh)
    unrel_pool = np.flatnonzero(~excluded[corpus.step_record])
    n_conf = round(cfg.background_size * cfg.confounder_share)
    n_unrel = cfg.background_size - n_conf
    if n_unrel > unrel_pool.size:
        raise ConfigError(
            f"toolbench: {n_unrel} unrelated steps wanted, only {unrel_pool.size} available"
        )
    background = np.concatenate(
        [_balanced_draw(conf_pool, n_conf, rng), rng.choice(unrel_pool, n_unrel, replace=False)]
    )
    background = rng.permutation(background)
    n = background.size + k
    ev_pos = evidence_positions(n, k)
    order = np.empty(n, dtype=np.int64)
    is_ev = np.zeros(n, dtype=bool)
    is_ev[ev_pos] = True
    order[ev_pos] = evidence
    order[~is_ev] = background
    steps = [corpus.steps[i] for i in order]
    if cfg.namespace_prefix:
        sigs = [prefix(s.source, s.tool_signature) for s in steps]
        ents = [prefix_entities(s.source, s.entities) for s in steps]
    else:
        sigs = [s.tool_signature for s in steps]
        ents = [s.entities for s in steps]
    view = MemoryView.build(
        corpus.step_embeddings[order],
        corpus.step_costs[order],
        tool_actions=[s.tool_action for s in steps],
        tool_signatures=sigs,
        entities=ents,
        subgoals=[s.subgoal for s in steps],
        sources=[s.source for s in steps],
        roles=[s.role for s in steps],
        texts=[s.text for s in steps],
    )
    ev = tuple(int(p) for p in ev_pos)
    rec = corpus.records[target]
    query = Query(
        qid=f"{episode_id}-q0",
        vector=corpus.query_embeddings[target],
        t=n,
        evidence=ev,
        text=rec.query,
        cell=cell_of(view, ev),
    )
    return Episode(
        episode_id=episode_id,
        view=view,
        queries=(query,),
        meta={
            "benchmark": "toolbench",
            "target": rec.source,
            "n_confounders": int(n_conf),
            "n_unrelated": int(n_unrel),
            "confounder_mask": np.isin(order, conf_pool) & ~is_ev,
        },
    )


def generate(corpus: ToolBenchCorpus, cfg: ToolBenchConfig, seed: int) -> Iterator[Episode]:
    """``cfg.n_episodes`` episodes for ``seed``. Targets are a seeded permutation of
    the eligible records (repeated only if more episodes than targets are asked);
    episode ``i`` draws from its own stream ``default_rng([seed, i])``."""
    targets = eligible_targets(corpus, cfg.evidence_size)
    if targets.size == 0:
        raise ConfigError(
            f"toolbench: no record has {cfg.evidence_size} or more tool calls (evidence_size)"
        )
    rng = np.random.default_rng(seed)
    reps = -(-cfg.n_episodes // targets.size)
    chosen = np.concatenate([rng.permutation(targets) for _ in range(reps)])[: cfg.n_episodes]
    for i, target in enumerate(chosen):
        yield build_episode(
            corpus,
            cfg,
            int(target),
            np.random.default_rng([seed, i]),
            episode_id=f"tb{seed}-k{cfg.evidence_size}-{i:03d}",
        )


def construction_stats(episodes: Sequence[Episode]) -> dict[str, float]:
    """Construction statistics: episodes, mean steps and cost, measured confounder
    share of the background, share of queries whose evidence pairwise shares a tool
    signature (T+), an entity (E+), both (T+E+)."""
    qs = [(ep, q) for ep in episodes for q in ep.queries]
    n_q = len(qs)
    if not n_q:
        return {"episodes": len(episodes), "queries": 0}
    tplus = [pairwise_share_tool(ep.view, q.evidence) for ep, q in qs]
    eplus = [pairwise_share_entity(ep.view, q.evidence) for ep, q in qs]
    conf = [float(ep.meta["confounder_mask"].sum()) for ep in episodes]
    bg = [float(ep.view.n - len(ep.queries[0].evidence)) for ep in episodes]
    return {
        "episodes": len(episodes),
        "queries": n_q,
        "mean_steps": float(np.mean([ep.view.n for ep in episodes])),
        "mean_cost": float(np.mean(np.concatenate([ep.view.costs for ep in episodes]))),
        "mean_evidence": float(np.mean([len(q.evidence) for _, q in qs])),
        "confounder_share": float(np.sum(conf) / np.sum(bg)),
        "share_T+": float(np.mean(tplus)),
        "share_E+": float(np.mean(eplus)),
        "share_T+E+": float(np.mean(np.logical_and(tplus, eplus))),
    }


def load_episodes(
    data: Path, cfg: ToolBenchConfig, seeds: Sequence[int], *, encoder: Encoder | None = None
) -> list[tuple[int, Episode]]:
    """Read the ToolBench answer files in ``data``, embed every text once
    (:func:`build_corpus`; the default SBERT encoder when ``encoder`` is None) and
    build the ``(seed, episode)`` pairs of ``seeds``."""
    records = read_toolbench(data, signature_level=cfg.signature_level)
    enc = encoder if encoder is not None else load_encoder()
    corpus = build_corpus(records, enc, step_roles=cfg.step_roles, n_neighbors=cfg.n_neighbors)
    return [(s, ep) for s in seeds for ep in generate(corpus, cfg, s)]
