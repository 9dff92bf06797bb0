"""CLI plugin: ``osumem bench toolbench`` and ``osumem reproduce toolbench``.

Heavy libraries (SBERT, pandas) are imported inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from osumem.cli._common import (
    BenchFlags,
    common_bench_options,
    episodes_option,
    handle_errors,
    int_list,
    jobs_option,
    out_dir_option,
    quiet_option,
    run_and_report,
)
from osumem.evaluate.defaults import BUDGETS, TOOLBENCH_METHODS, TOOLBENCH_SEEDS, as_option

TOOLBENCH_DEFAULT_METHODS = as_option(TOOLBENCH_METHODS)
TOOLBENCH_DEFAULT_BUDGETS = as_option(BUDGETS["toolbench"])
TOOLBENCH_DEFAULT_SEEDS = as_option(TOOLBENCH_SEEDS)

#: ``--data``, shared by ``bench toolbench`` and ``reproduce toolbench``.
DATA_OPTION = click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory with the ToolBench answer files (G1_*.json, G2_*.json).",
)


def _config(overrides: dict[str, str], episodes: int | None, evidence_size: int | None) -> Any:
    from osumem.bench.toolbench import ToolBenchConfig

    cfg = ToolBenchConfig()
    if overrides:
        cfg = cfg.with_strings(overrides, "toolbench")
    if episodes is not None:
        cfg = cfg.replace(n_episodes=episodes)
    if evidence_size is not None:
        cfg = cfg.replace(evidence_size=evidence_size)
    return cfg


def _stats_line(stats: dict[str, Any]) -> str:
    return (
        "toolbench: {episodes} episodes, {mean_steps:.0f} steps, mean cost {mean_cost:.1f}, "
        "confounders {confounder_share:.1%}, T+ {share_T+:.1%}, E+ {share_E+:.1%}, "
        "T+E+ {share_T+E+:.1%}".format(**stats)
    )


@click.command("toolbench")
@DATA_OPTION
@click.option(
    "--evidence-size",
    type=int,
    default=None,
    help="k, planted evidence steps per episode (default 3).",
)
@common_bench_options(TOOLBENCH_DEFAULT_METHODS, TOOLBENCH_DEFAULT_BUDGETS)
@handle_errors
def bench_toolbench(data: Path, evidence_size: int | None, flags: BenchFlags) -> None:
    """The ToolBench planted-evidence probe: per seed 200 episodes of
    ~500 steps (75% confounders from the 30 nearest-query trajectories), k evidence
    steps at evenly spaced positions, the target query embedded verbatim (SBERT).
    Benchmark knobs: --set toolbench.<param>=value (see ToolBenchConfig)."""
    from osumem.bench.toolbench import construction_stats, load_episodes
    from osumem.evaluate.options import split_overrides

    method_over, bench_over = split_overrides(flags.overrides, "toolbench")
    cfg = _config(bench_over, flags.episodes, evidence_size)
    seed_list = int_list(flags.seeds or TOOLBENCH_DEFAULT_SEEDS, "--seeds")
    eps = load_episodes(data, cfg, seed_list)
    stats = construction_stats([ep for _, ep in eps])
    if not flags.as_json:
        click.echo(_stats_line(stats), err=True)
    run_and_report(
        flags,
        benchmark="toolbench",
        episodes=eps,
        overrides=method_over,
        meta={"seeds": seed_list, "config": cfg.to_dict(), "construction": stats},
    )


@click.command("toolbench")
@DATA_OPTION
@out_dir_option(
    required=True, help="Report directory: toolbench*.parquet, toolbench_summary.md, report.md."
)
@click.option("--seeds", default=TOOLBENCH_DEFAULT_SEEDS, show_default=True)
@episodes_option(help="Episodes per seed (default 200).")
@click.option(
    "--sweep-episodes",
    type=int,
    default=None,
    help="Episodes per seed for the β and evidence-size sweeps (default 100).",
)
@click.option(
    "--full",
    is_flag=True,
    help="Run the sweeps at the main size (--episodes, default 200) as in the paper.",
)
@click.option(
    "--no-sensitivity",
    is_flag=True,
    help="Skip the labelled sensitivity runs (prefix on, similarity over all, Δ_gap 16).",
)
@jobs_option()
@quiet_option(None)
@handle_errors
def reproduce_toolbench(
    data: Path,
    out: Path,
    seeds: str,
    episodes: int | None,
    sweep_episodes: int | None,
    full: bool,
    no_sensitivity: bool,
    jobs: int,
    quiet: bool,
) -> None:
    """Reproduce the ToolBench tables: main table (3 seeds x 200 episodes), β sweep and
    evidence-size sweep (100 episodes per seed unless --full), membership/eviction,
    coarse-routing recall and labelled sensitivity runs, beside the paper's numbers.
    Writes toolbench*.parquet, toolbench_summary.md and report.md under --out."""
    from osumem.bench.reproduce import load_spec, reproduce

    spec = load_spec(
        "toolbench",
        seeds=tuple(int_list(seeds, "--seeds")),
        episodes=episodes,
        sweep_episodes=sweep_episodes,
        full_sweeps=full,
    )
    if no_sensitivity:
        spec = spec.replace(
            experiments=tuple(e for e in spec.experiments if e.role != "sensitivity")
        )
    info = reproduce(spec, data=data, out=out, jobs=jobs, progress=not quiet)
    click.echo((Path(out) / "toolbench_summary.md").read_text())
    click.echo(json.dumps(info, indent=2), err=True)
