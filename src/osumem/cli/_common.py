"""What the ``osumem`` commands share: the top-level group's error handling, the
common ``osumem bench`` flags and the checks that run before a command reads data,
the options several commands take (one decorator each), list parsing, and the
summary printer. Every command module imports from here; this
module imports no command module.

Errors go to stderr with exit status 2; heavy libraries are imported lazily.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import gc
import importlib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from osumem.errors import OSUMemError
from osumem.evaluate.defaults import BUDGETS, JOBS_RANGE, N_PERMUTATIONS, as_option

#: Default ``--budgets`` of the synthetic and tau-bench commands (the paper's).
DEFAULT_BUDGETS = as_option(BUDGETS["synthetic"])
#: Default ``--jobs``: one process for runs under 20 episodes, all cores from 20 on
#: (:func:`osumem.evaluate.runner.auto_jobs`; measured in docs/decisions.md).
DEFAULT_JOBS = "auto"
#: The namespace of ``--namespace`` (as ``osumem.memory.DEFAULT_NAMESPACE``, kept light here).
DEFAULT_NAMESPACE = "default"
#: The modules of the extra that holds the benchmark-only dependencies.
BENCH_MODULES = frozenset(
    {"pandas", "pyarrow", "matplotlib", "joblib", "tqdm", "sklearn", "networkx"}
)


def freeze_at_exit() -> None:
    """Freeze the garbage collector's objects when the process exits (``gc.freeze``,
    from an ``atexit`` handler, registered once), when no other thread is left.

    At exit the interpreter collects garbage over every object the command made and
    the ~300 modules it imported: 19–22 ms of a cold ``osumem query``'s 175 ms, against
    10 ms for ``import numpy`` alone. Frozen objects are left out of that collection;
    reference counting still frees what it frees, files and stores are closed by the
    commands themselves, and ``atexit`` handlers registered later (weakref finalizers
    included) still run. Not while another thread is alive (a daemon thread of a
    background refresh the command started and no longer needs): with such a thread
    still running, a frozen exit crashed about one run in three (SIGSEGV in the
    interpreter's shutdown; a test runs that case). Measured with
    ``benchmarks/cold_query.py``."""
    global _FREEZE_REGISTERED
    if not _FREEZE_REGISTERED:
        atexit.register(_freeze_if_alone)
        _FREEZE_REGISTERED = True


def _freeze_if_alone() -> None:
    import threading

    if threading.active_count() == 1:
        gc.freeze()


_FREEZE_REGISTERED = False


class LazyGroup(click.Group):
    """A group whose commands are imported when one is run or listed, not when the
    command line starts: ``lazy`` maps each command name to ``"module:attribute"``.
    ``osumem query`` then loads the memory commands' module and no other family's
    (the ``bench`` family alone took 10–19 ms to import)."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)


class OSUMemGroup(LazyGroup):
    """The top-level group: a usage error (bad flag, bad value) is one line on stderr
    with exit status 2, like every other error of the command line."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        standalone = kwargs.pop("standalone_mode", True)
        run: Any = super().main  # click types main() per standalone_mode literal
        if not standalone:
            return run(*args, standalone_mode=False, **kwargs)
        freeze_at_exit()
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
    if benchmark == "locomo":
        from osumem.bench.locomo import LoCoMoConfig

        return LoCoMoConfig
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchFlags:
    """The flags every ``osumem bench <benchmark>`` command takes, checked
    (:func:`common_bench_options`): ``episodes`` an integer or None, ``jobs`` an
    integer or ``"auto"``; ``overrides`` still the raw ``--set`` strings."""

    methods: str
    budgets: str
    episodes: int | None
    seeds: str | None
    jobs: int | str
    out: Path | None
    as_json: bool
    overrides: tuple[str, ...]
    quiet: bool

    def replace(self, **changes: Any) -> BenchFlags:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


#: The :class:`BenchFlags` fields, which are also the flags' parameter names.
_BENCH_FLAGS = tuple(f.name for f in dataclasses.fields(BenchFlags))


def common_bench_options(default_methods: str, default_budgets: str) -> Callable[..., Any]:
    """The flags every ``osumem bench <benchmark>`` command takes. Their values are
    checked together before the command reads any data
    (:func:`osumem.evaluate.options.check_experiment`); the command receives them as
    one :class:`BenchFlags` argument, ``flags``."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        return options(
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
            out_dir_option(
                default=None,
                help="Directory for the per-query result rows (Parquet) and run metadata.",
            ),
            json_option("Print the summary as JSON only."),
            click.option(
                "--set",
                "overrides",
                multiple=True,
                metavar="NAME.PARAM=VALUE",
                help="Override a method parameter (e.g. osumem.max_memberships=3) or a "
                "benchmark parameter (e.g. synthetic.noise_scale=1.1). Repeatable.",
            ),
            quiet_option("No progress bar (there is none anyway when stderr is not a terminal)."),
        )(_check_experiment_first(fn))

    return decorate


def _check_experiment_first(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Validate every common flag before the command loads or encodes any data,
    reporting every problem at once on one line (exit status 2); then hand them to
    the command as ``flags``."""

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
        flags = BenchFlags(**{name: kwargs.pop(name) for name in _BENCH_FLAGS})
        return fn(*args, flags=flags, **kwargs)

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


#: ``--encoder`` of the commands that open a memory store.
STORE_ENCODER_HELP = (
    "Encoder of a new store: 'sbert' (default), 'hashing[:d<dim>]' or a "
    "sentence-transformers model directory. An existing store uses the one it was "
    "made with: leave --encoder out (naming another one is an error)."
)


def options(*decorators: Callable[..., Any]) -> Callable[..., Any]:
    """The option ``decorators`` as one decorator, in the order given (the order of
    the help page)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for deco in reversed(decorators):
            fn = deco(fn)
        return fn

    return decorate


#: A location naming a store server (``postgresql://...``) rather than a file.
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


class StoreLocation(click.ParamType):
    """``--store``: a SQLite file (a :class:`~pathlib.Path`; not a folder) or a server
    URL such as ``postgresql://user@host/db`` (kept as text)."""

    name = "store"

    def convert(self, value: Any, param: Any, ctx: Any) -> Path | str:
        if isinstance(value, Path) or not _URL.match(str(value)):
            path = Path(value)
            if path.is_dir():
                self.fail(f"{str(value)!r} is a directory, not a store file", param, ctx)
            return path
        return str(value)


def store_option(*, help: str, **kwargs: Any) -> Callable[..., Any]:
    """``--store PATH|URL``: a SQLite memory store file or a ``postgresql://`` URL
    (``required`` or ``default`` in ``kwargs``)."""
    return click.option("--store", type=StoreLocation(), metavar="PATH|URL", help=help, **kwargs)


def require_store(store: Path | str) -> None:
    """A store to read must exist: a missing SQLite file is one error line (a server
    URL is checked by opening it)."""
    from osumem.errors import DataFileError

    if isinstance(store, Path) and not store.is_file():
        raise DataFileError(f"memory store not found: {store}")


def echo_ingested(summary: dict[str, Any], where: str, as_json: bool) -> None:
    """Print an ingest's summary (``osumem ingest``, into a store or a server): as JSON,
    or as one line naming ``where`` the steps went."""
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    skipped = summary.get("logs_skipped_as_duplicates", 0)
    dup = f", {skipped} skipped as already stored" if skipped else ""
    click.echo(
        f"ingested {summary['logs']} log(s){dup}, {summary['steps_added']} steps into "
        f"namespace {summary['namespace']!r} of {where} ({summary['steps_in_namespace']} "
        f"steps there; encoder {summary['encoder']})"
    )


def shown_store(store: Path | str | None) -> str:
    """A store location as messages print it (a URL's password masked)."""
    return re.sub(r"(://[^/:@]*):[^/@]*@", r"\1:***@", str(store))


def server_option(*, help: str) -> Callable[..., Any]:
    """``--server URL``: a running ``osumem serve --transport http``."""
    return click.option("--server", default=None, metavar="URL", help=help)


def namespace_option(*, help: str) -> Callable[..., Any]:
    """``--namespace``, default ``default`` (the library's default namespace)."""
    return click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True, help=help)


def method_option(*, help: str, default: str = "osumem") -> Callable[..., Any]:
    """``--method NAME``: one retrieval method."""
    return click.option("--method", default=default, show_default=True, help=help)


def budget_option(**kwargs: Any) -> Callable[..., Any]:
    """``--budget``: one token budget (default 256)."""
    kwargs.setdefault("default", 256)
    return click.option("--budget", type=int, show_default=True, **kwargs)


def blas_threads_option() -> Callable[..., Any]:
    """``--blas-threads N`` (the command's ``blas_threads`` argument): the memory's
    ``blas_threads`` setting; pass it on with :func:`blas_setting`."""
    return click.option(
        "--blas-threads",
        type=click.IntRange(min=0),
        default=1,
        show_default=True,
        help="BLAS threads while the memory adds and retrieves (one pays best for a "
        "memory's small matrices); 0 keeps the BLAS library's own setting.",
    )


def blas_setting(blas_threads: int) -> int | None:
    """The ``blas_threads`` setting of a memory for ``--blas-threads`` (0: ``None``)."""
    return blas_threads or None


def json_option(help: str) -> Callable[..., Any]:
    """``--json`` (the command's ``as_json`` argument)."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def quiet_option(help: str | None = "No progress output.") -> Callable[..., Any]:
    """``--quiet``: no progress output."""
    return click.option("--quiet", is_flag=True, help=help)


def out_dir_option(**kwargs: Any) -> Callable[..., Any]:
    """``--out DIRECTORY`` (``required``, ``default`` and ``help`` in ``kwargs``)."""
    return click.option("--out", type=click.Path(file_okay=False, path_type=Path), **kwargs)


def out_file_option(*, help: str) -> Callable[..., Any]:
    """``--out FILE``, optional."""
    return click.option(
        "--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help=help
    )


def jobs_option(**kwargs: Any) -> Callable[..., Any]:
    """``--jobs N`` of the reproduce, compare and report commands: parallel workers or
    threads (default -1, all cores)."""
    kwargs.setdefault("default", -1)
    return click.option("--jobs", type=int, show_default=True, **kwargs)


def episodes_option(*, help: str) -> Callable[..., Any]:
    """``--episodes N``: episodes per seed (default: the benchmark's)."""
    return click.option("--episodes", type=int, default=None, help=help)


def permutations_option(**kwargs: Any) -> Callable[..., Any]:
    """``--permutations N``: permutations per sign-flip test."""
    return click.option(
        "--permutations", type=int, default=N_PERMUTATIONS, show_default=True, **kwargs
    )


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
    flags: BenchFlags,
    *,
    benchmark: str,
    episodes: list[Any],
    overrides: dict[str, dict[str, str]],
    meta: dict[str, Any],
) -> Any:
    """Shared tail of every bench command: run (:func:`osumem.evaluate.options.run_experiment`)
    with the common ``flags`` and the method ``overrides``, say where the rows went,
    print the summary."""
    from osumem.evaluate.options import run_experiment

    rows, path = run_experiment(
        benchmark=benchmark,
        episodes=episodes,
        methods=flags.methods,
        budgets=int_list(flags.budgets, "--budgets"),
        jobs=flags.jobs,
        out=flags.out,
        overrides=overrides,
        meta=meta,
        progress=not flags.quiet,
    )
    if path is not None:
        click.echo(f"rows written to {path}", err=True)
    print_summary(rows, flags.as_json)
    return rows


def encoder_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--encoder`` and ``--cache``: the step encoder and its embedding cache file."""
    fn = click.option(
        "--cache",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Embedding cache file (default $OSUMEM_CACHE_DIR or ~/.cache/osumem).",
    )(fn)
    return click.option(
        "--encoder",
        type=click.Choice(["sbert", "hashing"]),
        default="sbert",
        show_default=True,
        help="Step encoder (sbert: all-MiniLM-L6-v2 offline).",
    )(fn)
