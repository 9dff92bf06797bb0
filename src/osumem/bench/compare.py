"""Run a set of methods on every benchmark the user has data for (synthetic always,
tau-bench and Stage D, ToolBench): the rows ``osumem bench compare`` compares."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_benchmarks(
    runs: list[Any],
    *,
    synthetic_seeds: list[int],
    taubench_data: Path | None,
    taubench_seeds: list[int],
    stage_d: bool,
    toolbench_data: Path | None,
    toolbench_seeds: list[int],
    episodes: int | None,
    budgets: list[int],
    toolbench_budgets: list[int],
    jobs: int,
    out: Path | None,
    progress: bool,
) -> Any:
    """Build each benchmark's episodes, run ``runs`` on them, write the rows to ``out``
    (one Parquet file per benchmark) and return all rows together."""
    import pandas as pd

    from osumem.bench.synthetic import SyntheticConfig, generate
    from osumem.evaluate.runner import run, write_results

    def run_one(name: str, eps: list[Any], bud: list[int], meta: dict[str, Any]) -> Any:
        rows = run(eps, runs, bud, benchmark=name, jobs=jobs, progress=progress)
        if out is not None:
            write_results(out, rows, {**meta, "methods": [r.label for r in runs]}, name=name)
        return rows

    syn_cfg = SyntheticConfig()
    if episodes is not None:
        syn_cfg = syn_cfg.replace(n_episodes=episodes)
    eps = [(s, ep) for s in synthetic_seeds for ep in generate(syn_cfg, s)]
    parts = [run_one("synthetic", eps, budgets, {"seeds": synthetic_seeds})]
    if taubench_data is not None:
        from osumem.bench.taubench import TauBenchConfig
        from osumem.bench.taubench_report import build_taubench

        tau_cfg = TauBenchConfig()
        if episodes is not None:
            tau_cfg = tau_cfg.replace(n_episodes=episodes)
        for name, aug in (("taubench", False), ("taubench_stage_d", True)):
            if aug and not stage_d:
                continue
            eps, _ = build_taubench(taubench_data, tau_cfg, taubench_seeds, stage_d=aug)
            parts.append(run_one(name, eps, budgets, {"seeds": taubench_seeds}))
    if toolbench_data is not None:
        from osumem.bench.toolbench import ToolBenchConfig, load_episodes

        tb_cfg = ToolBenchConfig()
        if episodes is not None:
            tb_cfg = tb_cfg.replace(n_episodes=episodes)
        eps = load_episodes(toolbench_data, tb_cfg, toolbench_seeds)
        parts.append(run_one("toolbench", eps, toolbench_budgets, {"seeds": toolbench_seeds}))
    return pd.concat(parts, ignore_index=True)
