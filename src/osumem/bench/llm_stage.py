"""The LLM evidence-selection stage: does a retrieval gain survive a model reading it?

For each query and method (default Flat and OSU-Mem) at the chosen budgets, the stage
retrieves the steps again exactly as the retrieval run did (same registry, seed and
causal prefix; checked against the run's rows), shows the model the query text and the
retrieved steps as :meth:`osumem.memory.Retrieved.render` lists them, and asks which
steps are evidence (:func:`osumem.llm.ask_evidence`). Hard and soft recall
(:mod:`osumem.evaluate.llm_metrics`) go into the same per-query rows as the retrieval
metrics, as the columns :data:`~osumem.evaluate.llm_metrics.LLM_COLUMNS`; rows the
stage did not score keep NaN there.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from osumem.errors import ConfigError
from osumem.evaluate.llm_metrics import LLM_COLUMNS, hard_recall, soft_recall
from osumem.evaluate.metrics import score_query
from osumem.evaluate.runner import MethodRun
from osumem.frozen import Constraints, FrozenConfig, Interval, TupleOf
from osumem.llm import LLMClient, PromptConfig, ask_evidence
from osumem.memory.retrieved import Retrieved, RetrievedStep
from osumem.retrieve.registry import create
from osumem.types import Episode, MemoryView

log = logging.getLogger(__name__)
_KEY = ["seed", "episode", "query", "method", "budget"]


@dataclass(frozen=True, kw_only=True)
class LLMStageConfig(FrozenConfig):
    """What the stage scores.

    Attributes:
        methods: method labels to score (they must have rows); the comparison is the
            first-listed OSU-Mem label against Flat.
        budgets: budgets to score (``None``: every budget in the rows).
        prompt: prompt construction and bounds.
    """

    methods: tuple[str, ...] = ("flat", "osumem")
    budgets: tuple[int, ...] | None = None
    prompt: PromptConfig = field(default_factory=PromptConfig)

    config_name = "LLM stage"
    parameter_constraints: ClassVar[Constraints] = {
        "budgets": (TupleOf(Interval(int, 1, None)), None),
    }


def retrieved_from_view(
    view: MemoryView, positions: Sequence[int], *, method: str, budget: int, query: str
) -> Retrieved:
    """A :class:`Retrieved` for benchmark steps (no store: ids are positions)."""
    steps = tuple(
        RetrievedStep(
            position=int(p),
            step_id=int(p),
            namespace=str(view.sources[p]),
            source=str(view.sources[p]),
            role=str(view.roles[p]),
            text=str(view.texts[p]),
            tool_action=str(view.tool_actions[p]),
            cost=int(view.costs[p]),
            osus=(),
            rank=rank,
        )
        for rank, p in enumerate(positions)
    )
    return Retrieved(namespace="benchmark", method=method, budget=budget, steps=steps, query=query)


def run_llm_stage(
    rows: pd.DataFrame,
    episodes: Sequence[tuple[int, Episode]],
    runs: Sequence[MethodRun],
    client: LLMClient,
    *,
    config: LLMStageConfig | None = None,
    progress: bool = True,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Score the evidence selection of ``client`` and add it to ``rows``.

    Args:
        rows: per-query rows of the retrieval run over ``episodes``.
        episodes: the ``(seed, episode)`` pairs the rows came from.
        runs: the method runs of the retrieval run (labels, names, parameters).
        client: the language model.
        config: methods, budgets, prompt.
        progress: a progress bar on a terminal.

    Returns:
        ``rows`` with the :data:`LLM_COLUMNS` filled for the scored rows, and run
        information (contexts, malformed answers, wall and CPU seconds).

    Raises:
        ConfigError: a method to score has no rows or run, or a budget has no rows.
        RuntimeError: re-retrieval disagrees with the rows (they came from elsewhere).
    """
    config = config or LLMStageConfig()
    by_label = {r.label: r for r in runs}
    present = set(rows["method"])
    missing = [m for m in config.methods if m not in by_label or m not in present]
    if missing:
        raise ConfigError(
            f"LLM stage: methods {missing} have no rows; add them to --methods "
            f"(the stage compares {', '.join(config.methods)})"
        )
    all_budgets = sorted(int(b) for b in rows["budget"].unique())
    budgets = list(config.budgets) if config.budgets else all_budgets
    bad = [b for b in budgets if b not in all_budgets]
    if bad:
        raise ConfigError(f"LLM stage: budgets {bad} have no rows (rows have {all_budgets})")
    index = rows.set_index(_KEY).index
    recall_of = dict(zip(index, rows["recall"].to_numpy(), strict=True))
    n_total = sum(len(ep.queries) for _, ep in episodes) * len(config.methods) * len(budgets)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    scored: dict[tuple[Any, ...], dict[str, Any]] = {}
    bar = tqdm(
        total=n_total, desc="llm stage", unit="ctx", disable=None if progress else True, leave=False
    )
    for seed, ep in episodes:
        by_t: dict[int, list[Any]] = defaultdict(list)
        for q in ep.queries:
            by_t[int(q.t)].append(q)
        for label in config.methods:
            run = by_label[label]
            retriever = create(run.method, run.params, seed=seed)
            for t in sorted(by_t):
                retriever.fit(ep.view.prefix(t))
                for q in by_t[t]:
                    for b in budgets:
                        key = (seed, ep.episode_id, q.qid, label, b)
                        sel = retriever.retrieve(q.vector, b, text=q.text or None)
                        positions = [int(p) for p in sel.positions]
                        s = score_query(np.asarray(positions, dtype=np.int64), q.evidence, t)
                        if key not in recall_of or not np.isclose(recall_of[key], s.recall):
                            raise RuntimeError(
                                f"LLM stage: re-retrieval of {key} does not match the rows"
                            )
                        view = ep.view
                        retrieved = retrieved_from_view(
                            view, positions, method=label, budget=b, query=q.text
                        )
                        start = time.perf_counter()
                        ans = ask_evidence(client, q.text, retrieved, config.prompt)
                        scored[key] = {
                            "llm_model": client.model_id,
                            "llm_hard_recall": hard_recall(ans.selection.positions, q.evidence),
                            "llm_soft_recall": soft_recall(ans.scores, q.evidence),
                            "llm_selected": list(ans.selection.positions),
                            "llm_scores": [ans.scores[p] for p in sorted(ans.scores)],
                            "llm_parse_ok": ans.selection.ok,
                            "llm_answer": ans.answer,
                            "llm_s": time.perf_counter() - start,
                        }
                        bar.update(1)
    bar.close()
    out = rows.copy()
    keys = list(index)
    for col in LLM_COLUMNS:
        out[col] = [scored[k][col] if k in scored else None for k in keys]
    for col in ("llm_hard_recall", "llm_soft_recall", "llm_s"):
        out[col] = pd.to_numeric(out[col], errors="coerce").astype(float)
    malformed = sum(1 for v in scored.values() if not v["llm_parse_ok"])
    info: dict[str, Any] = {
        "model": client.model_id,
        "methods": list(config.methods),
        "budgets": budgets,
        "contexts": len(scored),
        "malformed": malformed,
        "wall_s": round(time.perf_counter() - wall0, 1),
        "cpu_s": round(time.process_time() - cpu0, 1),
    }
    for attr in ("hits", "misses"):
        if hasattr(client, attr):
            info[f"cache_{attr}"] = getattr(client, attr)
    inner = getattr(client, "client", client)
    for attr in ("load_s", "prompt_tokens", "generated_tokens"):
        if hasattr(inner, attr):
            info[attr] = round(getattr(inner, attr), 2)
    if malformed:
        log.warning("LLM stage: %d of %d answers were malformed", malformed, len(scored))
    return out, info


def run_stage_for_cli(
    llm: str,
    rows: pd.DataFrame,
    episodes: Sequence[tuple[int, Episode]],
    runs: Sequence[MethodRun],
    *,
    budgets: Sequence[int] | None = None,
    cache: str | None = None,
    progress: bool = True,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The stage as ``--llm`` runs it: make the (cached) client, score Flat and
    OSU-Mem; returns the rows and the run information."""
    from osumem.llm import make_client

    client = make_client(llm, cache=cache if cache else True)
    cfg = LLMStageConfig(budgets=tuple(budgets) if budgets else None)
    out, info = run_llm_stage(rows, episodes, runs, client, config=cfg, progress=progress)
    close = getattr(client, "close", None)
    if callable(close):
        close()
    return out, info
