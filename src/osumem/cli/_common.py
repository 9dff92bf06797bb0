"""What the ``osumem`` commands share: the top-level group's error handling, the
common ``osumem bench`` flags and the checks that run before a command reads data,
list parsing, and the summary printer. Every command module imports from here; this
module imports no command module.

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

from osumem.errors import OSUMemError
from osumem.evaluate.defaults import BUDGETS, JOBS_RANGE, as_option

#: Default ``--budgets`` of the synthetic and tau-bench commands (the paper's).
DEFAULT_BUDGETS = as_option(BUDGETS["synthetic"])
#: Default ``--jobs``: one process for runs under 20 episodes, all cores from 20 on
#: (:func:`osumem.evaluate.runner.auto_jobs`; measured in docs/decisions.md).
DEFAULT_JOBS = "auto"
#: The extra that holds the benchmark-only dependencies.
BENCH_MODULES = frozenset({"pandas", "pyarrow", "matplotlib"})


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


def int_list(text: str, what: str) -> list[int]:
    """A comma-separated list of integers; an unreadable or empty one is a usage error
    naming ``what``."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{what}: expected comma-separated integers, got {text!r}"
        ) from None
    if not values:
        raise click.BadParameter(f"{what}: empty list")
    return values


def bench_config_class(benchmark: str) -> type | None:
    """The config class ``--set <benchmark>.<param>=value`` reaches (None: none)."""
    if benchmark == "synthetic":
        from osumem.bench.synthetic import SyntheticConfig

        return SyntheticConfig
    if benchmark == "taubench":
        from osumem.bench.taubench import TauBenchConfig

        return TauBenchConfig
    if benchmark == "toolbench":
        from osumem.bench.toolbench import ToolBenchConfig

        return ToolBenchConfig
    return None


def common_bench_options(default_methods: str, default_budgets: str) -> Callable[..., Any]:
    """The flags every ``osumem bench <benchmark>`` command takes. Their values are
    checked together before the command reads any data
    (:func:`osumem.evaluate.options.check_experiment`);
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
            from osumem.evaluate.options import check_experiment

            problems, values = check_experiment(
                benchmark,
                bench_config=bench_config_class(benchmark),
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


def encoder_option(*, default: str | None, help: str) -> Callable[..., Any]:
    """``--encoder NAME`` (the command's ``encoder`` argument) plus ``--model``, its old
    spelling: hidden from the help, it still works for one release with a note on
    stderr; giving both with different values is an error."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            old = kwargs.pop("deprecated_model", None)
            if old is not None:
                ctx = click.get_current_context()
                given = (
                    ctx.get_parameter_source("encoder") == click.core.ParameterSource.COMMANDLINE
                )
                if given and kwargs.get("encoder") != old:
                    click.echo(
                        "osumem: error: give --encoder or its old spelling --model, not both",
                        err=True,
                    )
                    sys.exit(2)
                click.echo("osumem: note: --model is deprecated; use --encoder", err=True)
                kwargs["encoder"] = old
            return fn(*args, **kwargs)

        hidden = click.option("--model", "deprecated_model", default=None, hidden=True)(wrapper)
        return click.option(
            "--encoder", default=default, show_default=default is not None, help=help
        )(hidden)

    return deco


def _exit_if_bench_extra_missing(exc: ModuleNotFoundError) -> None:
    """One line naming the ``bench`` extra (exit 2) when ``exc`` is one of its modules."""
    if (exc.name or "").split(".")[0] in BENCH_MODULES:
        click.echo(
            f"osumem: error: this command needs {exc.name}, part of the 'bench' extra: "
            "pip install 'osumem[bench]'",
            err=True,
        )
        sys.exit(2)


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
    """Shared tail of every bench command: run (:func:`osumem.evaluate.options.run_experiment`),
    say where the rows went, print the summary."""
    from osumem.evaluate.options import run_experiment

    rows, path = run_experiment(
        benchmark=benchmark,
        episodes=episodes,
        methods=methods,
        budgets=int_list(budgets, "--budgets"),
        jobs=jobs,
        out=out,
        overrides=overrides,
        meta=meta,
        progress=not quiet,
    )
    if path is not None:
        click.echo(f"rows written to {path}", err=True)
    print_summary(rows, as_json)
    return rows
