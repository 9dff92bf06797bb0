"""``osumem report DIR``, ``osumem reproduce synthetic`` and ``osumem bench efficiency``."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import click

from osumem.cli._common import handle_errors, int_list
from osumem.evaluate.defaults import N_PERMUTATIONS, primary_budget


def _report_options(fn: Any) -> Any:
    for opt in reversed(
        [
            click.option(
                "--reference",
                default="osumem",
                show_default=True,
                help="Reference method: p-values are against it.",
            ),
            click.option(
                "--baseline",
                default="flat",
                show_default=True,
                help="Baseline of the cell cross-tab and interaction test.",
            ),
            click.option(
                "--permutations",
                type=int,
                default=N_PERMUTATIONS,
                show_default=True,
                help="Permutations per sign-flip test.",
            ),
        ]
    ):
        fn = opt(fn)
    return fn


def synthetic_config(
    params: dict[str, Any], *, episodes: int | None = None, dim: int | None = None
) -> Any:
    """A ``SyntheticConfig`` from an experiment's ``benchmark_params`` (validated)."""
    from osumem.bench.synthetic import SyntheticConfig

    cfg = SyntheticConfig()
    if params:
        cfg = cfg.with_strings({k: str(v) for k, v in params.items()}, "synthetic")
    if episodes is not None:
        cfg = cfg.replace(n_episodes=episodes)
    if dim is not None:
        cfg = cfg.replace(dim=dim)
    return cfg


def run_efficiency(exp: Any, *, episodes_cap: int | None, progress: bool) -> Any:
    """Measure an efficiency experiment at each of its dims; returns the table."""
    import pandas as pd

    from osumem.bench.synthetic import generate
    from osumem.evaluate.efficiency import efficiency_table, measure
    from osumem.evaluate.runner import parse_method_runs

    runs = parse_method_runs(list(exp.methods))
    n = exp.episodes if exp.episodes is not None else None
    if episodes_cap is not None:
        n = min(n, episodes_cap) if n is not None else episodes_cap
    frames = []
    for dim in exp.dims:
        cfg = synthetic_config(dict(exp.benchmark_params), episodes=n, dim=dim)
        eps = [ep for seed in exp.seeds for ep in generate(cfg, seed)]
        if progress:
            click.echo(
                f"efficiency: {len(runs)} methods × {len(eps)} episodes at {dim}-d", err=True
            )
        frames.append(measure(eps, runs, budget=exp.primary_budget, dim_label=str(dim)))
    raw = pd.concat(frames, ignore_index=True)
    return raw, efficiency_table(raw, reference=exp.reference)


def reproduce_synthetic_into(
    out: Path,
    *,
    configs: Sequence[Path | Traversable],
    jobs: int,
    episodes: int | None,
    progress: bool,
) -> dict[str, Any]:
    """Run every synthetic experiment in ``configs`` into ``out`` and write the report.

    All configs are validated first (every problem reported at once). The quality
    experiments share one run: the union of their methods and budgets over the same
    episodes, written to ``synthetic.parquet``. Reachability and evidence-OSU membership
    (overlap vs disjoint, every budget, the same episodes) go to ``analysis/``.
    """
    from osumem import __version__
    from osumem.bench.synthetic import construction_stats, generate
    from osumem.errors import ConfigError
    from osumem.evaluate.methods import TABLE_KEY, method_table
    from osumem.evaluate.runner import parse_method_runs, run, write_results
    from osumem.report.build import build_report
    from osumem.report.experiment import load_experiments

    started = time.perf_counter()
    exps = load_experiments(configs)
    quality = [e for e in exps if e.kind != "efficiency"]
    eff = [e for e in exps if e.kind == "efficiency"]
    if not quality:
        raise ConfigError(f"no synthetic quality experiment among {[str(c) for c in configs]}")
    keys = {(e.seeds, tuple(sorted(e.benchmark_params.items()))) for e in quality}
    if len(keys) > 1:
        raise ConfigError(
            "synthetic experiments disagree on seeds or benchmark_params: "
            + "; ".join(f"{e.source}: seeds {e.seeds}, {dict(e.benchmark_params)}" for e in quality)
        )
    methods = list(dict.fromkeys(m for e in quality for m in e.methods))
    budgets = sorted({b for e in quality for b in e.budgets})
    runs = parse_method_runs(methods)
    cfg = synthetic_config(dict(quality[0].benchmark_params), episodes=episodes)
    seeds = list(quality[0].seeds)
    eps = [(s, ep) for s in seeds for ep in generate(cfg, s)]
    stats = construction_stats([ep for _, ep in eps])
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows = run(eps, runs, budgets, benchmark="synthetic", jobs=jobs, progress=progress)
    quality_s = time.perf_counter() - t0
    write_results(
        out,
        rows,
        {
            "benchmark": "synthetic",
            "seeds": seeds,
            "config": cfg.to_dict(),
            "construction": stats,
            "methods": methods,
            TABLE_KEY: method_table(runs),
            "budgets": budgets,
            "version": __version__,
            "seconds": round(quality_s, 1),
        },
        name="synthetic",
    )
    timings = {"quality_s": round(quality_s, 1)}
    from osumem.evaluate.osu_analysis import write_osu_analysis

    if progress:
        click.echo("reachability and evidence-OSU membership (overlap vs disjoint)", err=True)
    analysis = write_osu_analysis(out, "synthetic", eps, budgets, jobs=jobs)
    timings["reach_membership_s"] = analysis["seconds"]
    if eff:
        import pandas as pd

        t0 = time.perf_counter()
        raws, tables = [], []
        for e in eff:
            raw, table = run_efficiency(e, episodes_cap=episodes, progress=progress)
            raws.append(raw)
            tables.append(table)
        pd.concat(tables).to_csv(out / "efficiency.csv", index=False)
        pd.concat(raws).to_csv(out / "efficiency_raw.csv.gz", index=False)
        timings["efficiency_s"] = round(time.perf_counter() - t0, 1)
    (out / "experiments.json").write_text(
        json.dumps([e.to_dict() for e in exps], indent=2, default=str) + "\n"
    )
    t0 = time.perf_counter()
    report = build_report(out)
    timings["report_s"] = round(time.perf_counter() - t0, 1)
    timings["total_s"] = round(time.perf_counter() - started, 1)
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    return {"report": str(report), **timings}


@click.command("report")
@click.argument("results", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Report file (default: RESULTS/report.md; figures beside it).",
)
@_report_options
@handle_errors
def report_cmd(
    results: Path, out: Path | None, reference: str, baseline: str, permutations: int
) -> None:
    """Turn a results directory (row files from `osumem bench ... --out DIR` or
    `osumem reproduce`) into report.md with tables, p-values, the paper's numbers
    beside ours, and PNG figures."""
    from osumem.report.build import ReportSettings, build_report

    settings = ReportSettings(reference=reference, baseline=baseline, n_permutations=permutations)
    path = build_report(results, settings=settings, out=out)
    click.echo(f"report written to {path}")


@click.command("synthetic")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Results directory (rows, efficiency, report.md, figures/).",
)
@click.option(
    "--jobs",
    type=int,
    default=-1,
    show_default=True,
    help="Parallel workers for the quality run (-1: all cores).",
)
@click.option(
    "--episodes",
    type=int,
    default=None,
    help="Episodes per seed (default: the paper's 200; also caps efficiency).",
)
@click.option(
    "--configs",
    "config_paths",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Experiment files (default: the paper's synthetic experiments shipped with the package).",
)
@click.option("--quiet", is_flag=True, help="No progress output.")
@handle_errors
def reproduce_synthetic(
    out: Path, jobs: int, episodes: int | None, config_paths: tuple[Path, ...], quiet: bool
) -> None:
    """The paper's synthetic configuration: all methods, four budgets, ablations,
    the M_max sweep and efficiency at 64-d and 384-d, then report.md."""
    from osumem.report.experiment import shipped_experiments

    paths = list(config_paths) or shipped_experiments("synthetic")
    info = reproduce_synthetic_into(
        out, configs=paths, jobs=jobs, episodes=episodes, progress=not quiet
    )
    click.echo(json.dumps(info, indent=2))


@click.command("efficiency")
@click.option("--methods", default="osumem,flat,flat_mmr,tree", show_default=True)
@click.option("--dims", default="64,384", show_default=True, help="Embedding dimensions.")
@click.option("--episodes", type=int, default=20, show_default=True)
@click.option("--budget", type=int, default=primary_budget("synthetic"), show_default=True)
@click.option(
    "--reference",
    default="flat",
    show_default=True,
    help="Ratios are to this method (it is added when missing).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for efficiency.csv (read by `osumem report`).",
)
@handle_errors
def bench_efficiency(
    methods: str, dims: str, episodes: int, budget: int, reference: str, out: Path | None
) -> None:
    """Retrieve-only latency, amortised latency and storage of methods on synthetic
    episodes at each dimension, with ratios to the reference in the same run."""
    from osumem.evaluate.runner import split_methods
    from osumem.report.experiment import Experiment

    names = split_methods(methods)
    if reference not in names:
        names.append(reference)
    exp = Experiment(
        name="efficiency",
        title="efficiency",
        kind="efficiency",
        benchmark="synthetic",
        budgets=(budget,),
        primary_budget=budget,
        reference=reference,
        methods=tuple(names),
        episodes=episodes,
        dims=tuple(int_list(dims, "--dims")),
    )
    _raw, table = run_efficiency(exp, episodes_cap=None, progress=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "efficiency.csv", index=False)
        click.echo(f"written {out / 'efficiency.csv'}", err=True)
    click.echo(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
