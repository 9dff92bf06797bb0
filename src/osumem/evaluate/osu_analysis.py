"""Reachability and evidence-OSU membership for any benchmark, written beside the rows.

:func:`osu_analysis_rows` takes episodes (of any benchmark) and returns two row tables,
built on every query's causal prefix exactly as the retrieval runner fits methods:

- **reach rows**, one per (mode, budget, evidence step): whether the coarse stage of
  the default coarse-to-fine OSU-Mem keeps an OSU of view ``v`` holding the step
  (``via_<view>``) and any OSU holding it (``reached``);
- **membership rows**, one per (mode, evidence step): the number of OSUs the step
  belongs to, in total and per view.

Modes are OSU-Mem overrides: overlap (``max_memberships = 5``, i.e. ``osumem``) and
disjoint (``max_memberships = 1``, i.e. ``osumem_disjoint``). :func:`write_osu_analysis`
stores them under ``<results>/analysis/<name>_reach.parquet`` and
``<name>_membership.parquet`` — a sub-folder, so tools that read every ``*.parquet`` of
a results directory as per-query retrieval rows never mistake them for such.
:func:`~osumem.evaluate.reach.reach_table`,
:func:`~osumem.evaluate.membership.membership_table` and :func:`reach_difference` aggregate
them for the report. Retrieval numbers never come from these files.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from osumem.evaluate.defaults import N_PERMUTATIONS
from osumem.evaluate.membership import DEFAULT_MODES, episode_membership_rows
from osumem.evaluate.reach import episode_reach_rows
from osumem.types import Episode

#: Sub-folder of a results directory holding derived analysis tables.
ANALYSIS_DIR = "analysis"


def _pairs(episodes: Sequence[Episode] | Sequence[tuple[int, Episode]]) -> list[tuple[int, Any]]:
    out: list[tuple[int, Any]] = []
    for item in episodes:
        if isinstance(item, tuple):
            out.append((int(item[0]), item[1]))
        else:
            out.append((0, item))
    return out


def _one_episode(
    seed: int,
    episode: Episode,
    budgets: Sequence[int],
    modes: Mapping[str, Mapping[str, Any]],
    method: str,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    return episode_osu_analysis(seed, episode, budgets=budgets, modes=modes, method=method)


def episode_osu_analysis(
    seed: int,
    episode: Episode,
    pools: Mapping[tuple[Any, int], tuple[Any, float]] | None = None,
    *,
    budgets: Sequence[int],
    modes: Mapping[str, Mapping[str, Any]] = DEFAULT_MODES,
    method: str = "osumem",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Reach rows and membership rows of one episode (what :func:`osu_analysis_rows`
    computes for it). ``pools``: the pools the retrieval runner built on this
    episode's prefixes with ``seed`` (``(construction settings, t) -> (pool,
    seconds)``), used instead of building the same pools again; this function has the
    signature of :func:`osumem.evaluate.runner.run_episodes`'s ``after`` hook."""
    budgets = [int(b) for b in budgets]
    reach = pd.DataFrame(
        episode_reach_rows(episode, budgets, modes, method=method, seed=seed, pools=pools)
    )
    member = pd.DataFrame(episode_membership_rows(episode, modes, seed=seed, pools=pools))
    reach.insert(0, "seed", seed)
    member.insert(0, "seed", seed)
    return reach, member


def osu_analysis_rows(
    episodes: Sequence[Episode] | Sequence[tuple[int, Episode]],
    budgets: Sequence[int],
    *,
    modes: Mapping[str, Mapping[str, Any]] = DEFAULT_MODES,
    method: str = "osumem",
    jobs: int = 1,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Reach rows and membership rows for ``episodes`` (plain episodes, seed 0, or
    ``(seed, episode)`` pairs as :func:`osumem.evaluate.runner.run` takes them; the seed
    seeds the OSU construction like the runner's). ``method`` must be a coarse-to-fine
    OSU-Mem (default ``osumem``); ``modes`` maps a mode name to its overrides."""
    from joblib import Parallel, delayed

    pairs = _pairs(episodes)
    budgets = [int(b) for b in budgets]
    parts = Parallel(n_jobs=jobs)(
        delayed(_one_episode)(s, ep, budgets, modes, method) for s, ep in pairs
    )
    return combine_parts(parts)


def combine_parts(
    parts: Sequence[tuple[pd.DataFrame, pd.DataFrame]],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One reach table and one membership table from per-episode parts (in order)."""
    reach = [r for r, _ in parts if not r.empty]
    member = [m for _, m in parts if not m.empty]
    return (
        pd.concat(reach, ignore_index=True) if reach else pd.DataFrame(),
        pd.concat(member, ignore_index=True) if member else pd.DataFrame(),
    )


def analysis_paths(results: Path, name: str) -> tuple[Path, Path]:
    """Where :func:`write_osu_analysis` puts ``name``'s reach and membership rows."""
    d = Path(results) / ANALYSIS_DIR
    return d / f"{name}_reach.parquet", d / f"{name}_membership.parquet"


def write_osu_analysis(
    results: Path,
    name: str,
    episodes: Sequence[Episode] | Sequence[tuple[int, Episode]],
    budgets: Sequence[int],
    *,
    modes: Mapping[str, Mapping[str, Any]] = DEFAULT_MODES,
    method: str = "osumem",
    jobs: int = 1,
    parts: Sequence[tuple[pd.DataFrame, pd.DataFrame]] | None = None,
    seconds: float = 0.0,
) -> dict[str, Any]:
    """Compute :func:`osu_analysis_rows` and write them beside the row file ``name``
    (e.g. ``"synthetic"``, ``"toolbench"``) of a results directory; ``osumem report``
    then adds the reachability and membership sections to that benchmark. ``parts``:
    the per-episode results of :func:`episode_osu_analysis` for ``episodes``, already
    computed (e.g. alongside the retrieval run, ``seconds`` taken there), written
    instead of computing them again. Returns the paths, row counts and seconds taken."""
    start = time.perf_counter() - seconds
    if parts is None:
        reach, member = osu_analysis_rows(episodes, budgets, modes=modes, method=method, jobs=jobs)
    else:
        reach, member = combine_parts(parts)
    rpath, mpath = analysis_paths(results, name)
    rpath.parent.mkdir(parents=True, exist_ok=True)
    for df, path in ((reach, rpath), (member, mpath)):
        tmp = path.with_name(f".{path.name}.tmp")
        df.to_parquet(tmp, index=False)
        tmp.replace(path)
    info = {
        "method": method,
        "modes": {k: dict(v) for k, v in modes.items()},
        "budgets": [int(b) for b in budgets],
        "reach_rows": len(reach),
        "membership_rows": len(member),
        "seconds": round(time.perf_counter() - start, 1),
    }
    rpath.with_name(f"{name}_analysis.json").write_text(json.dumps(info, indent=2) + "\n")
    return {"reach": str(rpath), "membership": str(mpath), **info}


def reach_difference(
    reach: pd.DataFrame,
    first: str = "overlap",
    second: str = "disjoint",
    *,
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> pd.DataFrame:
    """Per budget: empirical reach of ``first`` minus ``second`` mode, paired by query
    (mean reach of each query's evidence), two-sided sign-flip p per seed,
    Fisher-combined."""
    from osumem.evaluate.stats import seed_combined_p

    cols = ["budget", "n_queries", "diff", "p"]
    if reach.empty or not {first, second} <= set(reach["mode"]):
        return pd.DataFrame(columns=cols)
    per_q = (
        reach.groupby(["mode", "budget", "seed", "episode", "query"], sort=False)["reached"]
        .mean()
        .unstack("mode")
        .dropna(subset=[first, second])
    )
    per_q["d"] = per_q[first] - per_q[second]
    out = []
    for b, g in per_q.groupby(level="budget", sort=True):
        p = seed_combined_p(g, n_permutations=n_permutations, seed=seed)
        out.append([int(b), len(g), float(g["d"].mean()), p])
    return pd.DataFrame(out, columns=cols)
