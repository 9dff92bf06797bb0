"""``osumem bench locomo`` and ``osumem reproduce locomo``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from osumem.cli._common import (
    BenchFlags,
    common_bench_options,
    encoder_options,
    episodes_option,
    handle_errors,
    jobs_option,
    out_dir_option,
    permutations_option,
    quiet_option,
    run_and_report,
)
from osumem.evaluate.defaults import BUDGETS, as_option

#: The methods ``osumem bench locomo`` compares by default.
LOCOMO_METHODS = "flat,bm25,hybrid,osumem,osumem_adaptive,osumem_hybrid"

#: ``--data``, shared by ``bench locomo`` and ``reproduce locomo``.
DATA_OPTION = click.option(
    "--data",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="LoCoMo data in the locomo10.json layout (e.g. shared/data/locomo/locomo-dev.json).",
)
SAMPLES_OPTION = click.option(
    "--samples",
    default="",
    help="Comma-separated conversations (sample_id) to use (default: every one in the file).",
)


def _samples(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())


@click.command("locomo")
@DATA_OPTION
@SAMPLES_OPTION
@click.option(
    "--categories",
    default="1,2,3,4",
    show_default=True,
    help="Question categories to ask (5 is adversarial).",
)
@click.option(
    "--unit-costs", is_flag=True, help="Every turn costs 1 token: budgets count turns (top-k)."
)
@encoder_options
@common_bench_options(LOCOMO_METHODS, as_option(BUDGETS["locomo"]))
@handle_errors
def bench_locomo(
    data: Path,
    samples: str,
    categories: str,
    unit_costs: bool,
    encoder: str,
    cache: Path | None,
    flags: BenchFlags,
) -> None:
    """LoCoMo: every turn of each conversation added to the agent memory as one
    message, each question (its text and its embedding) as a query, Recall of the
    annotated evidence turns under the token budget. Benchmark knobs: --set
    locomo.<param>=value (LoCoMoConfig)."""
    from osumem.bench.locomo import LoCoMoConfig, build_locomo
    from osumem.evaluate.options import split_overrides

    method_over, bench_over = split_overrides(flags.overrides, "locomo")
    cfg = LoCoMoConfig().with_strings(
        {"categories": categories, "unit_costs": str(unit_costs), **bench_over}, "locomo"
    )
    if samples:
        cfg = cfg.replace(samples=_samples(samples))
    if flags.episodes is not None:
        cfg = cfg.replace(n_episodes=flags.episodes)
    eps, stats = build_locomo(data, cfg, encoder=encoder, cache=cache)
    if not flags.as_json:
        click.echo(
            "locomo: {conversations} conversations, {turns} turns, {queries} questions "
            "{queries_per_category}, {mean_evidence:.2f} evidence turns/question, "
            "{dropped_no_evidence} without mappable evidence".format(**stats),
            err=True,
        )
    run_and_report(
        flags,
        benchmark="locomo",
        episodes=eps,
        overrides=method_over,
        meta={"config": cfg.to_dict(), "encoder": encoder, "construction": stats},
    )


@click.command("locomo")
@DATA_OPTION
@SAMPLES_OPTION
@out_dir_option(
    required=True, help="Results directory (locomo*.parquet, report.md, locomo_summary.md)."
)
@jobs_option(help="Parallel workers.")
@episodes_option(help="Conversations to use at most (default: all).")
@encoder_options
@permutations_option(help="Permutations per sign-flip test.")
@quiet_option()
@handle_errors
def reproduce_locomo(
    data: Path,
    samples: str,
    out: Path,
    jobs: int,
    episodes: int | None,
    encoder: str,
    cache: Path | None,
    permutations: int,
    quiet: bool,
) -> None:
    """The LoCoMo experiments (osumem/experiments/locomo_*.toml): categories 1-4 at
    B = 128..1024, category 5 apart, and top-k turns beside the LoCoMo paper's
    DRAGON retriever; rows locomo*.parquet, then report.md with the summary."""
    from osumem.bench.reproduce import load_spec, reproduce

    spec = load_spec(
        "locomo",
        episodes=episodes,
        encoder=encoder,
        cache=cache,
        n_permutations=permutations,
        benchmark_params={"samples": list(_samples(samples))} if samples else {},
    )
    info = reproduce(spec, data=data, out=out, jobs=jobs, progress=not quiet)
    click.echo(json.dumps(info, indent=2))
