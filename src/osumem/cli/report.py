"""``osumem report DIR``, ``osumem results DIR...``, ``osumem reproduce synthetic`` and ``osumem bench efficiency``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from osumem.cli._common import (
    budget_option,
    episodes_option,
    handle_errors,
    int_list,
    jobs_option,
    options,
    out_dir_option,
    out_file_option,
    permutations_option,
    quiet_option,
)
from osumem.evaluate.defaults import primary_budget

_report_options = options(
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
    permutations_option(help="Permutations per sign-flip test."),
)


@click.command("report")
@click.argument("results", type=click.Path(exists=True, file_okay=False, path_type=Path))
@out_file_option(help="Report file (default: RESULTS/report.md; figures beside it).")
@_report_options
@jobs_option(help="Threads for the significance tests (-1: all cores).")
@handle_errors
def report_cmd(
    results: Path, out: Path | None, reference: str, baseline: str, permutations: int, jobs: int
) -> None:
    """Turn a results directory (row files from `osumem bench ... --out DIR` or
    `osumem reproduce`) into report.md with tables, p-values, the paper's numbers
    beside ours, and PNG figures."""
    from osumem.report.build import ReportSettings, build_report

    settings = ReportSettings(
        reference=reference, baseline=baseline, n_permutations=permutations, jobs=jobs
    )
    path = build_report(results, settings=settings, out=out)
    click.echo(f"report written to {path}")


@click.command("results")
@click.argument("runs", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@out_file_option(help="Write the page here (e.g. docs/results.md; default: print it).")
@handle_errors
def results_cmd(runs: tuple[Path, ...], out: Path | None) -> None:
    """The results page (ours beside the paper's) from `osumem reproduce` results
    directories, one per benchmark: the command of each run and its report's
    tables."""
    from osumem.report.results_md import results_markdown

    text = results_markdown(list(runs))
    if out is None:
        click.echo(text, nl=False)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    click.echo(f"written {out}", err=True)


@click.command("synthetic")
@out_dir_option(required=True, help="Results directory (rows, efficiency, report.md, figures/).")
@jobs_option(help="Parallel workers for the quality run (-1: all cores).")
@episodes_option(help="Episodes per seed (default: the paper's 200; also caps efficiency).")
@click.option(
    "--configs",
    "config_paths",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Experiment files (default: the paper's synthetic experiments shipped with the package).",
)
@quiet_option()
@handle_errors
def reproduce_synthetic(
    out: Path, jobs: int, episodes: int | None, config_paths: tuple[Path, ...], quiet: bool
) -> None:
    """The paper's synthetic configuration: all methods, four budgets, ablations,
    the M_max sweep and efficiency at 64-d and 384-d, then report.md."""
    from osumem.bench.reproduce import load_spec, reproduce

    spec = load_spec("synthetic", config_paths, episodes=episodes)
    info = reproduce(spec, out=out, jobs=jobs, progress=not quiet)
    click.echo(json.dumps(info, indent=2))


@click.command("efficiency")
@click.option("--methods", default="osumem,flat,flat_mmr,tree", show_default=True)
@click.option("--dims", default="64,384", show_default=True, help="Embedding dimensions.")
@click.option("--episodes", type=int, default=20, show_default=True)
@budget_option(default=primary_budget("synthetic"))
@click.option(
    "--reference",
    default="flat",
    show_default=True,
    help="Ratios are to this method (it is added when missing).",
)
@out_dir_option(default=None, help="Directory for efficiency.csv (read by `osumem report`).")
@handle_errors
def bench_efficiency(
    methods: str, dims: str, episodes: int, budget: int, reference: str, out: Path | None
) -> None:
    """Retrieve-only latency, amortised latency and storage of methods on synthetic
    episodes at each dimension, with ratios to the reference in the same run."""
    from osumem.bench.reproduce import run_efficiency
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
