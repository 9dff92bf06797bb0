"""CLI plugin: ``osumem bench compare``: one method against Flat and the structured
variants on every benchmark the user has data for. Heavy modules load inside."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from osumem.cli._common import (
    handle_errors,
    int_list,
    jobs_option,
    json_option,
    method_option,
    out_dir_option,
    permutations_option,
    quiet_option,
)
from osumem.evaluate.defaults import BUDGETS, TOOLBENCH_SEEDS, as_option


@click.command("compare")
@method_option(default="osumem_adaptive", help="Method to test.")
@click.option(
    "--baselines",
    default="flat,osumem,osumem_disjoint",
    show_default=True,
    help="Comma-separated methods to compare against (Flat first: the bar is vs Flat).",
)
@click.option("--synthetic-seeds", default="0,1,2,3,4", show_default=True)
@click.option(
    "--taubench",
    "taubench_data",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="tau-bench results JSON; adds tau-bench (with its cells) and Stage D.",
)
@click.option("--taubench-seeds", default="0", show_default=True)
@click.option("--no-stage-d", is_flag=True, help="Skip the Stage D augmentation run.")
@click.option(
    "--toolbench",
    "toolbench_data",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="ToolBench data directory (G1_*.json, G2_*.json); adds the ToolBench probe.",
)
@click.option("--toolbench-seeds", default=as_option(TOOLBENCH_SEEDS), show_default=True)
@click.option("--episodes", type=int, default=None, help="Episodes per seed (default: all).")
@click.option("--budgets", default=as_option(BUDGETS["synthetic"]), show_default=True)
@click.option("--toolbench-budgets", default=as_option(BUDGETS["toolbench"]), show_default=True)
@permutations_option()
@jobs_option(default=1, help="Parallel workers.")
@out_dir_option(
    default=None,
    help="Directory for the per-query rows (one Parquet file per benchmark) and compare.md.",
)
@click.option(
    "--rows",
    "rows_dir",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Compare result rows already written (a Parquet file or directory) instead of "
    "running the benchmarks.",
)
@json_option("Print the comparison as JSON.")
@quiet_option("No progress bar.")
@handle_errors
def bench_compare(
    method: str,
    baselines: str,
    synthetic_seeds: str,
    taubench_data: Path | None,
    taubench_seeds: str,
    no_stage_d: bool,
    toolbench_data: Path | None,
    toolbench_seeds: str,
    episodes: int | None,
    budgets: str,
    toolbench_budgets: str,
    permutations: int,
    jobs: int,
    out: Path | None,
    rows_dir: Path | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Run METHOD and the baselines on synthetic (always), tau-bench and Stage D
    (with --taubench) and ToolBench (with --toolbench), then print per benchmark ×
    budget × cell the Hit@2 and Recall differences METHOD − baseline with
    episode-level sign-flip p-values Fisher-combined over seeds, and where METHOD
    loses to Flat (significantly, or by more than 1 pp)."""
    from osumem.bench.compare import run_benchmarks
    from osumem.evaluate.compare import check_bar, compare_rows
    from osumem.evaluate.runner import parse_method_runs, read_results

    base_list = [b.strip() for b in baselines.split(",") if b.strip()]
    runs = parse_method_runs([method, *base_list])  # every name checked before any run
    if rows_dir is not None:
        rows = read_results(rows_dir)
    else:
        rows = run_benchmarks(
            runs,
            synthetic_seeds=int_list(synthetic_seeds, "--synthetic-seeds"),
            taubench_data=taubench_data,
            taubench_seeds=int_list(taubench_seeds, "--taubench-seeds"),
            stage_d=not no_stage_d,
            toolbench_data=toolbench_data,
            toolbench_seeds=int_list(toolbench_seeds, "--toolbench-seeds"),
            episodes=episodes,
            budgets=int_list(budgets, "--budgets"),
            toolbench_budgets=int_list(toolbench_budgets, "--toolbench-budgets"),
            jobs=jobs,
            out=out,
            progress=not quiet,
        )
    report = compare_rows(rows, method=method, baselines=base_list, n_permutations=permutations)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.md").write_text(report.to_markdown() + "\n")
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, default=_json_default))
        return
    click.echo(report.to_markdown())
    fails = check_bar(report, baseline=base_list[0]) if base_list else []
    click.echo("")
    if fails:
        click.echo(f"{method} loses to {base_list[0]} at: " + "; ".join(fails))
    else:
        click.echo(f"{method} never loses to {base_list[0]} significantly or by more than 1 pp.")


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)
