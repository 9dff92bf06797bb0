"""The ``osumem`` command line. Thin: parses flags, calls the library, prints.

Errors go to stderr with exit status 2; heavy libraries are imported lazily.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from osumem import __version__
from osumem.errors import OSUMemError

DEFAULT_BUDGETS = "64,128,256,512"


def _int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{what}: expected comma-separated integers, got {text!r}"
        ) from None
    if not values:
        raise click.BadParameter(f"{what}: empty list")
    return values


def common_bench_options(default_methods: str, default_budgets: str) -> Callable[..., Any]:
    """The flags every ``osumem bench <benchmark>`` command takes."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.option(
                "--methods",
                default=default_methods,
                show_default=True,
                help="Comma-separated method names (see `osumem methods`); inline "
                "parameters as name[param=value;param=value].",
            ),
            click.option(
                "--budgets", default=default_budgets, show_default=True, help="Token budgets."
            ),
            click.option(
                "--episodes", type=int, default=None, help="Episodes per seed (default: all)."
            ),
            click.option("--seeds", default=None, help="Comma-separated seeds."),
            click.option(
                "--jobs",
                type=int,
                default=-1,
                show_default=True,
                help="Parallel workers (-1: all cores).",
            ),
            click.option(
                "--out",
                type=click.Path(file_okay=False, path_type=Path),
                default=None,
                help="Directory for the per-query result rows (Parquet) and run metadata.",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON only."),
            click.option(
                "--set",
                "overrides",
                multiple=True,
                metavar="NAME.PARAM=VALUE",
                help="Override a method parameter (e.g. osumem.max_memberships=3) or a "
                "benchmark parameter (e.g. synthetic.noise_scale=1.1). Repeatable.",
            ),
            click.option("--quiet", is_flag=True, help="No progress bar."),
        ]
        fn = _check_experiment_first(fn)
        for opt in reversed(options):
            fn = opt(fn)
        return fn

    return decorate


def _check_experiment_first(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Validate ``--methods``, ``--budgets`` and method ``--set`` values before the
    command loads or encodes any data, reporting every problem at once."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from osumem.errors import ConfigError
        from osumem.evaluate.runner import parse_method_runs, split_methods
        from osumem.retrieve.base import check_budget
        from osumem.retrieve.registry import make_config

        benchmark = click.get_current_context().info_name or ""
        try:
            for b in _int_list(kwargs["budgets"], "--budgets"):
                check_budget(b)
            method_over, _ = split_overrides(kwargs.get("overrides", ()), benchmark)
            problems = []
            for name, params in method_over.items():  # --set for methods not run, too
                try:
                    make_config(name, params)
                except OSUMemError as exc:
                    problems.append(str(exc))
            if problems:
                raise ConfigError("; ".join(problems))
            if kwargs["methods"] != "ALL":
                parse_method_runs(split_methods(kwargs["methods"]), method_over)
        except OSUMemError as exc:
            click.echo(f"osumem: error: {exc}", err=True)
            sys.exit(2)
        return fn(*args, **kwargs)

    return wrapper


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn library errors into a one-line message on stderr and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (OSUMemError, FileNotFoundError) as exc:
            click.echo(f"osumem: error: {exc}", err=True)
            sys.exit(2)

    return wrapper


def split_overrides(
    overrides: tuple[str, ...], benchmark: str
) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Split ``--set`` values into method overrides and benchmark overrides."""
    from osumem.retrieve.registry import parse_overrides

    bench: dict[str, str] = {}
    methods: list[str] = []
    for item in overrides:
        if item.split(".", 1)[0].strip() == benchmark:
            key, _, value = item.partition("=")
            bench[key.split(".", 1)[1].strip()] = value.strip()
        else:
            methods.append(item)
    return parse_overrides(methods), bench


def print_summary(rows: Any, as_json: bool, header: str = "") -> None:
    """Print the Recall / Hit@1 / Hit@2 table (or its JSON form) to stdout."""
    from osumem.evaluate.metrics import summary_json
    from osumem.report.tables import summary_table

    if as_json:
        click.echo(json.dumps(summary_json(rows), indent=2))
        return
    if header:
        click.echo(header)
    click.echo(summary_table(rows))


def run_and_report(
    *,
    benchmark: str,
    episodes: list[Any],
    methods: str,
    budgets: str,
    jobs: int,
    out: Path | None,
    as_json: bool,
    overrides: dict[str, dict[str, str]],
    meta: dict[str, Any],
    quiet: bool,
) -> Any:
    """Shared tail of every bench command: validate, run, write rows, print."""
    from osumem.evaluate.runner import parse_method_runs, run, split_methods, write_results

    runs = parse_method_runs(split_methods(methods), overrides)
    budget_list = _int_list(budgets, "--budgets")
    rows = run(episodes, runs, budget_list, benchmark=benchmark, jobs=jobs, progress=not quiet)
    if out is not None:
        meta = {
            **meta,
            "benchmark": benchmark,
            "methods": [r.__dict__ | {"params": dict(r.params)} for r in runs],
            "budgets": budget_list,
            "version": __version__,
        }
        path = write_results(out, rows, meta, name=benchmark)
        click.echo(f"rows written to {path}", err=True)
    print_summary(rows, as_json)
    return rows


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="osumem")
def main() -> None:
    """OSU-Mem: trajectory memory for LLM agents, and the harness that reproduces
    "When Does Overlap Help?" (OSU-Mem, arXiv 2606.28376).

    Run `osumem bench synthetic` for the paper's synthetic benchmark.
    """


@main.command("methods")
def methods_cmd() -> None:
    """List the registered retrieval methods."""
    from osumem.retrieve.registry import available, get_spec

    for name in available():
        click.echo(f"{name:26s} {get_spec(name).description}")


@main.group()
def bench() -> None:
    """Run a benchmark: methods × budgets, per-query rows, a summary table."""


#: Table 2 of the paper: the nine baselines and OSU-Mem.
SYNTHETIC_DEFAULT_METHODS = (
    "no_memory,truncated_replay,sliding_window,periodic_summary,flat,flat_mmr,coverage,"
    "disjoint_hierarchy,tree,osumem"
)


@bench.command("synthetic")
@common_bench_options(SYNTHETIC_DEFAULT_METHODS, DEFAULT_BUDGETS)
@handle_errors
def bench_synthetic(
    methods: str,
    budgets: str,
    episodes: int | None,
    seeds: str | None,
    jobs: int,
    out: Path | None,
    as_json: bool,
    overrides: tuple[str, ...],
    quiet: bool,
) -> None:
    """The synthetic benchmark (SPEC §6.1): 200 seeded episodes, 64-d embeddings,
    no downloaded data. Evaluation seed 0 by default."""
    from osumem.bench.synthetic import SyntheticConfig, construction_stats, generate

    method_over, bench_over = split_overrides(overrides, "synthetic")
    cfg = SyntheticConfig()
    if bench_over:
        cfg = _apply_dataclass_overrides(cfg, bench_over, "synthetic")
    if episodes is not None:
        cfg = cfg.replace(n_episodes=episodes)
    seed_list = _int_list(seeds, "--seeds") if seeds else [0]
    eps = [(s, ep) for s in seed_list for ep in generate(cfg, s)]
    stats = construction_stats([ep for _, ep in eps])
    if not as_json:
        click.echo(
            "synthetic: {episodes_with_queries}/{episodes} episodes with queries, "
            "{queries} queries, {mean_evidence:.2f} evidence/query, identical signature "
            "{share_identical_signature:.1%}, same action {share_same_action:.1%}".format(**stats),
            err=True,
        )
    run_and_report(
        benchmark="synthetic",
        episodes=eps,
        methods=methods,
        budgets=budgets,
        jobs=jobs,
        out=out,
        as_json=as_json,
        overrides=method_over,
        meta={"seeds": seed_list, "config": cfg.__dict__, "construction": stats},
        quiet=quiet,
    )


def _apply_dataclass_overrides(cfg: Any, values: dict[str, str], where: str) -> Any:
    """Apply ``--set <benchmark>.<param>=value`` to a benchmark config dataclass."""
    import dataclasses
    import typing

    from osumem.retrieve.registry import _coerce

    hints = typing.get_type_hints(type(cfg))
    known = {f.name for f in dataclasses.fields(cfg)}
    unknown = sorted(set(values) - known)
    if unknown:
        from osumem.errors import ConfigError

        raise ConfigError(f"{where}: unknown parameter(s) {unknown}; known: {sorted(known)}")
    return cfg.replace(**{k: _coerce(v, hints[k], f"{where}.{k}") for k, v in values.items()})


#: Modules that add commands to the CLI; each defines ``register(main, bench)``.
#: They must import only light modules at import time (heavy ones inside commands).
PLUGIN_MODULES: tuple[str, ...] = (
    "osumem.cli_report",  # first: it creates the `reproduce` group the others extend
    "osumem.cli_taubench",
    "osumem.cli_toolbench",
    "osumem.cli_memory",
    "osumem.cli_scale",
)


def _register_plugins() -> None:
    import importlib

    for name in PLUGIN_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(main, bench)


_register_plugins()


if __name__ == "__main__":  # pragma: no cover
    main()
