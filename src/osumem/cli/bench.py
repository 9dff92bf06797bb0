"""``osumem bench synthetic`` (and ``osumem methods``): the paper's synthetic benchmark."""

from __future__ import annotations

import click

from osumem.cli._common import (
    DEFAULT_BUDGETS,
    BenchFlags,
    common_bench_options,
    handle_errors,
    int_list,
    run_and_report,
)

#: Table 2 of the paper: the nine baselines and OSU-Mem.
SYNTHETIC_DEFAULT_METHODS = (
    "no_memory,truncated_replay,sliding_window,periodic_summary,flat,flat_mmr,coverage,"
    "disjoint_hierarchy,tree,osumem"
)


@click.command("methods")
def methods_cmd() -> None:
    """List the registered retrieval methods."""
    from osumem.retrieve.registry import available, get_spec

    for name in available():
        click.echo(f"{name:26s} {get_spec(name).description}")


@click.command("synthetic")
@common_bench_options(SYNTHETIC_DEFAULT_METHODS, DEFAULT_BUDGETS)
@handle_errors
def bench_synthetic(flags: BenchFlags) -> None:
    """The synthetic benchmark of the paper: 200 seeded episodes, 64-d embeddings,
    no downloaded data. Evaluation seed 0 by default."""
    from osumem.bench.synthetic import SyntheticConfig, construction_stats, generate
    from osumem.evaluate.options import apply_overrides, split_overrides

    method_over, bench_over = split_overrides(flags.overrides, "synthetic")
    cfg = SyntheticConfig()
    if bench_over:
        cfg = apply_overrides(cfg, bench_over, "synthetic")
    if flags.episodes is not None:
        cfg = cfg.replace(n_episodes=flags.episodes)
    seed_list = int_list(flags.seeds, "--seeds") if flags.seeds else [0]
    eps = [(s, ep) for s in seed_list for ep in generate(cfg, s)]
    stats = construction_stats([ep for _, ep in eps])
    if not flags.as_json:
        click.echo(
            "synthetic: {episodes_with_queries}/{episodes} episodes with queries, "
            "{queries} queries, {mean_evidence:.2f} evidence/query, identical signature "
            "{share_identical_signature:.1%}, same action {share_same_action:.1%}".format(**stats),
            err=True,
        )
    run_and_report(
        flags,
        benchmark="synthetic",
        episodes=eps,
        overrides=method_over,
        meta={"seeds": seed_list, "config": cfg.to_dict(), "construction": stats},
    )
