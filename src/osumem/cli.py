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
#: Default ``--jobs``: one process for runs under 20 episodes, all cores from 20 on
#: (:func:`osumem.evaluate.runner.auto_jobs`; measured in docs/decisions.md).
DEFAULT_JOBS = "auto"
#: What ``--jobs`` accepts, in words (the one place that says it).
JOBS_RANGE = "auto, -1 (all cores) or a number of workers >= 1"
#: The extra that holds the benchmark-only dependencies.
BENCH_MODULES = frozenset({"pandas", "pyarrow", "matplotlib"})
#: Benchmark config classes that ``--set <benchmark>.<param>=value`` reaches.
BENCH_CONFIGS: dict[str, str] = {
    "synthetic": "osumem.bench.synthetic:SyntheticConfig",
    "taubench": "osumem.bench.taubench:TauBenchConfig",
    "toolbench": "osumem.bench.toolbench:ToolBenchConfig",
}


class OSUMemGroup(click.Group):
    """The top-level group: a usage error (bad flag, bad value) is one line on stderr
    with exit status 2, like every other error of the command line."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        standalone = kwargs.pop("standalone_mode", True)
        run: Any = super().main  # click types main() per standalone_mode literal
        if not standalone:
            return run(*args, standalone_mode=False, **kwargs)
        try:
            result = run(*args, standalone_mode=False, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            message = exc.format_message().replace("\n", " ")
            click.echo(f"osumem: error: {message}{hint}", err=True)
            sys.exit(2)
        except click.ClickException as exc:
            click.echo(f"osumem: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("osumem: aborted", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)


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


def _check_int(text: str, flag: str, accepted: str, ok: Callable[[int], bool]) -> int | str:
    """``text`` as an int, or the problem (a string) naming ``flag`` and ``accepted``."""
    try:
        value = int(str(text).strip())
    except ValueError:
        return f"{flag}: expected {accepted}, got {text!r}"
    return value if ok(value) else f"{flag}: expected {accepted}, got {value}"


def _check_int_list(text: str, flag: str, accepted: str, ok: Callable[[int], bool]) -> str | None:
    """The problem with a comma-separated integer list, or None when it is fine."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items:
        return f"{flag}: expected comma-separated {accepted}, got {text!r}"
    bad = [x for x in items if isinstance(_check_int(x, flag, accepted, ok), str)]
    if bad:
        return f"{flag}: expected comma-separated {accepted}, got {', '.join(bad)}"
    return None


def _describe(annotation: Any) -> str:
    """A field type in words, for error messages (``int`` → "an integer")."""
    import types
    import typing

    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return f"{_describe(options[0]) if options else 'a value'} or none"
    if origin is tuple:
        items = typing.get_args(annotation)
        word = {int: "integers", float: "numbers", str: "names"}.get(items[0] if items else str)
        if items and items[-1] is not Ellipsis:
            return f"{len(items)} {word} written {','.join('abcdefgh'[: len(items)])}"
        return f"{word} written a,b,..."
    return {int: "an integer", float: "a number", bool: "true or false", str: "text"}.get(
        annotation, str(annotation)
    )


def read_value(value: str, annotation: Any, where: str) -> Any:
    """A ``--set`` string read as the type a config field declares; an unreadable
    value raises :class:`ConfigError` naming ``where`` and the type in words."""
    import typing

    from osumem.errors import ConfigError
    from osumem.retrieve.registry import _coerce

    try:
        result = _coerce(value, annotation, where)
    except ConfigError:
        raise ConfigError(f"{where}: expected {_describe(annotation)}, got {value!r}") from None
    inner = typing.get_args(annotation) if typing.get_origin(annotation) is tuple else ()
    if inner and inner[-1] is not Ellipsis and len(result) != len(inner):
        raise ConfigError(f"{where}: expected {_describe(annotation)}, got {value!r}")
    return result


def _bench_config_class(benchmark: str) -> Any:
    import importlib

    target = BENCH_CONFIGS.get(benchmark)
    if target is None:
        return None
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def check_experiment(
    benchmark: str,
    *,
    methods: str,
    budgets: str,
    episodes: str | None,
    seeds: str | None,
    jobs: str,
    overrides: tuple[str, ...],
) -> tuple[list[str], dict[str, Any]]:
    """Every problem with a bench command's flags, and the parsed numeric values.

    Returns ``(problems, values)``: ``problems`` lists every bad flag value, each named
    with what it accepts; ``values`` holds ``jobs`` (an integer or ``"auto"``) and
    ``episodes`` (an integer or None).
    """
    import typing

    from osumem.errors import OSUMemError, UnknownMethodError
    from osumem.evaluate.runner import parse_method_runs, split_methods
    from osumem.retrieve.registry import get_class, get_spec, make_config

    problems: list[str] = []
    values: dict[str, Any] = {"episodes": None}
    jobs_value: int | str = "auto"
    if str(jobs).strip().lower() != "auto":
        jobs_value = _check_int(jobs, "--jobs", JOBS_RANGE, lambda v: v == -1 or v >= 1)
        if isinstance(jobs_value, str):
            problems.append(jobs_value)
    values["jobs"] = jobs_value
    if episodes is not None:
        n = _check_int(episodes, "--episodes", "an integer >= 1", lambda v: v >= 1)
        if isinstance(n, str):
            problems.append(n)
        values["episodes"] = n
    for flag, text, accepted, ok in (
        ("--budgets", budgets, "integers >= 1 (tokens)", lambda v: v >= 1),
        ("--seeds", seeds, "integers >= 0", lambda v: v >= 0),
    ):
        if text is not None:
            problem = _check_int_list(text, flag, accepted, ok)
            if problem:
                problems.append(problem)
    method_over: dict[str, dict[str, str]] = {}
    bad_methods: set[str] = set()
    bench_over: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        name, dot, param = key.strip().partition(".")
        if not sep or not dot or not name or not param.strip():
            problems.append(f"--set: expected NAME.PARAM=VALUE, got {item!r}")
            continue
        param, value = param.strip(), value.strip()
        if name == benchmark:
            bench_over[param] = value
            continue
        try:
            get_spec(name)
        except UnknownMethodError:
            problems.append(
                f"--set {item!r}: {name!r} is neither a method (see `osumem methods`) "
                f"nor this benchmark ({benchmark!r})"
            )
            continue
        try:
            hints = typing.get_type_hints(get_class(name).Config)
            if param in hints:
                read_value(value, hints[param], f"--set {name}.{param}")
            method_over.setdefault(name, {})[param] = value
        except OSUMemError as exc:
            problems.append(str(exc))
            bad_methods.add(name)
    for name, params in method_over.items():  # --set for methods not run, too
        if name in bad_methods:
            continue
        try:
            make_config(name, params)
        except OSUMemError as exc:
            problems.append(f"--set {name}: {exc}")
            bad_methods.add(name)
    if bench_over:
        cls = _bench_config_class(benchmark)
        if cls is not None:
            read, bench_problems = _read_overrides(cls(), bench_over, f"--set {benchmark}")
            problems.extend(bench_problems)
            if not bench_problems:
                try:
                    cls().replace(**read)
                except OSUMemError as exc:
                    problems.append(f"--set {exc}")
    if methods != "ALL":
        specs = split_methods(methods)
        inline, unreadable = _inline_value_problems(specs)
        problems.extend(inline)
        good = {k: v for k, v in method_over.items() if k not in bad_methods}
        try:
            parse_method_runs([m for m in specs if m not in unreadable], good)
        except OSUMemError as exc:
            problems.append(f"--methods: {exc}")
    return problems, values


def _inline_value_problems(specs: list[str]) -> tuple[list[str], set[str]]:
    """Unreadable inline parameter values (``osumem[max_memberships=abc]``), each named
    with the type it needs, and the specs that hold them; other problems are left to
    the method parser."""
    import typing

    from osumem.errors import OSUMemError
    from osumem.evaluate.runner import _SPEC_RE
    from osumem.retrieve.registry import get_class

    problems: list[str] = []
    unreadable: set[str] = set()
    for spec in specs:
        m = _SPEC_RE.match(spec.strip())
        if not m or not m.group("params"):
            continue
        try:
            hints = typing.get_type_hints(get_class(m.group("name")).Config)
        except OSUMemError:
            continue
        for part in m.group("params").split(";"):
            key, sep, value = part.partition("=")
            if sep and key.strip() in hints:
                try:
                    read_value(
                        value.strip(), hints[key.strip()], f"--methods {spec}: {key.strip()}"
                    )
                except OSUMemError as exc:
                    problems.append(str(exc))
                    unreadable.add(spec)
    return problems, unreadable


def common_bench_options(default_methods: str, default_budgets: str) -> Callable[..., Any]:
    """The flags every ``osumem bench <benchmark>`` command takes. Their values are
    checked together before the command reads any data (:func:`check_experiment`);
    the command receives ``episodes`` as an integer and ``jobs`` as an integer or
    ``"auto"``."""

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
                "--budgets",
                default=default_budgets,
                show_default=True,
                help="Token budgets, integers >= 1.",
            ),
            click.option(
                "--episodes",
                default=None,
                metavar="N",
                help="Episodes per seed, >= 1 (default: all).",
            ),
            click.option("--seeds", default=None, help="Comma-separated seeds, integers >= 0."),
            click.option(
                "--jobs",
                default=DEFAULT_JOBS,
                show_default=True,
                metavar="N",
                help=f"Parallel worker processes: {JOBS_RANGE} (auto: one process under "
                "20 episodes, all cores from 20).",
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
            click.option(
                "--quiet",
                is_flag=True,
                help="No progress bar (there is none anyway when stderr is not a terminal).",
            ),
        ]
        fn = _check_experiment_first(fn)
        for opt in reversed(options):
            fn = opt(fn)
        return fn

    return decorate


def _check_experiment_first(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Validate every common flag before the command loads or encodes any data,
    reporting every problem at once on one line (exit status 2)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        benchmark = click.get_current_context().info_name or ""
        try:
            problems, values = check_experiment(
                benchmark,
                methods=kwargs["methods"],
                budgets=kwargs["budgets"],
                episodes=kwargs.get("episodes"),
                seeds=kwargs.get("seeds"),
                jobs=kwargs["jobs"],
                overrides=tuple(kwargs.get("overrides", ())),
            )
        except OSUMemError as exc:
            problems, values = [str(exc)], {}
        except ModuleNotFoundError as exc:
            _exit_if_bench_extra_missing(exc)
            raise
        if problems:
            head = f"{len(problems)} problems: " if len(problems) > 1 else ""
            text = "; ".join(p.replace("\n", " ") for p in problems)
            click.echo(f"osumem: error: {head}{text}", err=True)
            sys.exit(2)
        kwargs.update(values)
        return fn(*args, **kwargs)

    return wrapper


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn library errors into a one-line message on stderr and exit status 2; a
    missing benchmark-only dependency names the extra that installs it."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (OSUMemError, FileNotFoundError) as exc:
            click.echo(f"osumem: error: {exc}", err=True)
            sys.exit(2)
        except ModuleNotFoundError as exc:
            _exit_if_bench_extra_missing(exc)
            raise

    return wrapper


def _exit_if_bench_extra_missing(exc: ModuleNotFoundError) -> None:
    """One line naming the ``bench`` extra (exit 2) when ``exc`` is one of its modules."""
    if (exc.name or "").split(".")[0] in BENCH_MODULES:
        click.echo(
            f"osumem: error: this command needs {exc.name}, part of the 'bench' extra: "
            "pip install 'osumem[bench]'",
            err=True,
        )
        sys.exit(2)


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
    jobs: int | str,
    out: Path | None,
    as_json: bool,
    overrides: dict[str, dict[str, str]],
    meta: dict[str, Any],
    quiet: bool,
) -> Any:
    """Shared tail of every bench command: validate, run, write rows, print."""
    from osumem.evaluate.methods import method_table
    from osumem.evaluate.runner import parse_method_runs, run, split_methods, write_results

    runs = parse_method_runs(split_methods(methods), overrides)
    budget_list = _int_list(budgets, "--budgets")
    rows = run(episodes, runs, budget_list, benchmark=benchmark, jobs=jobs, progress=not quiet)
    if out is not None:
        meta = {
            **meta,
            "benchmark": benchmark,
            "methods": [r.to_dict() for r in runs],
            "method_table": method_table(runs),
            "budgets": budget_list,
            "version": __version__,
        }
        path = write_results(out, rows, meta, name=benchmark)
        click.echo(f"rows written to {path}", err=True)
    print_summary(rows, as_json)
    return rows


@click.group(cls=OSUMemGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
    jobs: int | str,
    out: Path | None,
    as_json: bool,
    overrides: tuple[str, ...],
    quiet: bool,
) -> None:
    """The synthetic benchmark of the paper: 200 seeded episodes, 64-d embeddings,
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
        meta={"seeds": seed_list, "config": cfg.to_dict(), "construction": stats},
        quiet=quiet,
    )


def _read_overrides(cfg: Any, values: dict[str, str], where: str) -> tuple[dict, list[str]]:
    """``--set <benchmark>.<param>=value`` strings read as ``cfg``'s field types, and
    every problem (unknown names, unreadable values)."""
    import dataclasses
    import typing

    from osumem.errors import ConfigError

    hints = typing.get_type_hints(type(cfg))
    known = {f.name for f in dataclasses.fields(cfg)}
    problems = []
    unknown = sorted(set(values) - known)
    if unknown:
        problems.append(f"{where}: unknown parameter(s) {unknown}; known: {sorted(known)}")
    read = {}
    for k, v in values.items():
        if k in known:
            try:
                read[k] = read_value(v, hints[k], f"{where}.{k}")
            except ConfigError as exc:
                problems.append(str(exc))
    return read, problems


def _apply_dataclass_overrides(cfg: Any, values: dict[str, str], where: str) -> Any:
    """Apply ``--set <benchmark>.<param>=value`` to a benchmark config dataclass; every
    unknown name and unreadable value is reported together, then the config's own
    range checks run."""
    from osumem.errors import ConfigError

    read, problems = _read_overrides(cfg, values, where)
    if problems:
        raise ConfigError("; ".join(problems))
    return cfg.replace(**read)


# The other command modules, registered explicitly. They import the helpers above, so
# they are imported here, after those are defined; each imports only light modules at
# import time (heavy ones inside its commands). `reproduce` comes first: the others
# add their subcommands to it.
from osumem import (  # noqa: E402
    cli_compare,
    cli_memory,
    cli_report,
    cli_scale,
    cli_serve,
    cli_taubench,
    cli_toolbench,
)

for _commands in (
    cli_report,
    cli_taubench,
    cli_toolbench,
    cli_memory,
    cli_compare,
    cli_serve,
    cli_scale,
):
    _commands.register(main, bench)


if __name__ == "__main__":  # pragma: no cover
    main()
