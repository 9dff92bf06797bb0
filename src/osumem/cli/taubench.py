"""``osumem bench taubench`` and ``osumem reproduce taubench``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from osumem.cli._common import (
    DEFAULT_BUDGETS,
    BenchFlags,
    common_bench_options,
    encoder_options,
    episodes_option,
    handle_errors,
    int_list,
    jobs_option,
    out_dir_option,
    permutations_option,
    quiet_option,
    run_and_report,
)
from osumem.cli.llm import bench_llm, llm_option, reproduce_llm


def default_methods() -> str:
    """``--methods ALL``: every registered non-oracle method whose module imports."""
    from osumem.evaluate.methods import runnable_methods

    return ",".join(runnable_methods())


#: ``--data``, shared by ``bench taubench`` and ``reproduce taubench``.
DATA_OPTION = click.option(
    "--data",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="tau-bench results JSON (e.g. shared/data/taubench/gpt-4o-airline.json).",
)


@click.command("taubench")
@DATA_OPTION
@click.option(
    "--query-mode",
    type=click.Choice(["noisy_mean", "single_step"]),
    default="noisy_mean",
    show_default=True,
    help="Query vector: noisy mean of the evidence, or one random evidence step + noise.",
)
@click.option("--no-prefix", is_flag=True, help="Turn namespace prefixing off (the pitfall).")
@click.option("--stage-d", is_flag=True, help="Stage D augmentation (3 copies per evidence).")
@encoder_options
@llm_option
@common_bench_options("ALL", DEFAULT_BUDGETS)
@handle_errors
def bench_taubench(
    data: Path,
    query_mode: str,
    no_prefix: bool,
    stage_d: bool,
    encoder: str,
    cache: Path | None,
    llm: str | None,
    flags: BenchFlags,
) -> None:
    """tau-bench: concatenated airline trajectories, focal evidence far
    from the query. Benchmark knobs: --set taubench.<param>=value (TauBenchConfig).
    --methods ALL (default) runs every registered non-oracle method."""
    from osumem.bench.taubench import TauBenchConfig
    from osumem.bench.taubench_report import build_taubench
    from osumem.evaluate.options import split_overrides

    method_over, bench_over = split_overrides(flags.overrides, "taubench")
    cfg = TauBenchConfig(query_mode=query_mode, prefix_namespace=not no_prefix)
    if bench_over:
        cfg = cfg.with_strings(bench_over, "taubench")
    if flags.episodes is not None:
        cfg = cfg.replace(n_episodes=flags.episodes)
    seed_list = int_list(flags.seeds, "--seeds") if flags.seeds else [0]
    eps, stats = build_taubench(data, cfg, seed_list, stage_d=stage_d, encoder=encoder, cache=cache)
    if not flags.as_json:
        click.echo(
            "taubench: {trajectories} trajectories, {gt_actions} ground-truth actions, "
            "matched exact {matched_exact} / relaxed {matched_relaxed}; {episodes} "
            "episodes, {queries} queries, {mean_evidence:.2f} evidence/query, "
            "cells {cells}".format(**stats),
            err=True,
        )
    name = "taubench" + ("_stage_d" if stage_d else "")
    if flags.methods == "ALL":
        flags = flags.replace(methods=default_methods())
    rows = run_and_report(
        flags,
        benchmark=name,
        episodes=eps,
        overrides=method_over,
        meta={
            "seeds": seed_list,
            "config": cfg.to_dict(),
            "stage_d": stage_d,
            "encoder": encoder,
            "construction": stats,
        },
    )
    if llm:
        bench_llm(llm, rows, eps, methods=flags.methods, overrides=method_over, out=flags.out,
                  name=name, as_json=flags.as_json, quiet=flags.quiet)  # fmt: skip


@click.command("taubench")
@DATA_OPTION
@out_dir_option(
    required=True, help="Results directory (taubench*.parquet, report.md, taubench_summary.md)."
)
@jobs_option(help="Parallel workers.")
@episodes_option(help="Episodes per seed (default 125).")
@click.option("--seeds", default="0", show_default=True, help="Comma-separated seeds.")
@encoder_options
@llm_option
@permutations_option(help="Permutations per sign-flip test.")
@quiet_option()
@handle_errors
def reproduce_taubench(
    data: Path,
    out: Path,
    jobs: int,
    episodes: int | None,
    seeds: str,
    encoder: str,
    cache: Path | None,
    llm: str | None,
    permutations: int,
    quiet: bool,
) -> None:
    """The paper's tau-bench experiments: all methods at B = 64..512 (prefix on,
    steps are the calls alone), the weaker single-step queries, the query-noise
    scaling check, Stage D, prefix off and tool responses kept to 200 characters;
    rows taubench*.parquet, then report.md with the paper's numbers beside ours."""
    from osumem.bench.reproduce import load_spec, reproduce
    from osumem.bench.taubench_report import build_taubench

    spec = load_spec(
        "taubench",
        seeds=tuple(int_list(seeds, "--seeds")),
        episodes=episodes,
        encoder=encoder,
        cache=cache,
        n_permutations=permutations,
    )
    info = reproduce(spec, data=data, out=out, jobs=jobs, progress=not quiet)
    if llm:
        info["llm"] = reproduce_llm(llm, data=data, out=out, seeds=int_list(seeds, "--seeds"),
            episodes=episodes, build=build_taubench, encoder=encoder, cache=cache,
            n_permutations=permutations, quiet=quiet)  # fmt: skip
    click.echo(json.dumps(info, indent=2))
