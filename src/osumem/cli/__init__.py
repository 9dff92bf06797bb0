"""The ``osumem`` command line. Thin: parses flags, calls the library, prints.

This module holds the top-level group and says which command goes where; the
commands live in one module per family (:mod:`osumem.cli.memory`,
:mod:`osumem.cli.bench`, ...), imported only when one of their commands runs or is
listed; their shared helpers in :mod:`osumem.cli._common`, below every command
module. Errors go to stderr with exit status 2; heavy libraries are imported inside
the commands, so ``osumem --help`` stays fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Container, MutableMapping
from pathlib import PurePath

import osumem.process
from osumem.process import BLAS_THREAD_VARIABLES

#: The commands that own a memory for their whole process, and take ``--blas-threads``.
MEMORY_COMMANDS = frozenset({"query", "ingest", "serve"})


def blas_at_start(
    argv: list[str],
    environ: MutableMapping[str, str],
    modules: Container[str] = sys.modules,
) -> int | None:
    """Set the BLAS libraries' thread variables (``OPENBLAS_NUM_THREADS`` and the
    others of :data:`osumem.process.BLAS_THREAD_VARIABLES`) for a memory command
    before NumPy is imported.

    OpenBLAS starts its thread pool when NumPy loads: one thread per core, about 100 ms
    of CPU on a 2-core machine, for a process whose memory then runs with one BLAS
    thread (``--blas-threads``, default 1). Only for the ``osumem`` program itself
    (``argv[0]`` is ``osumem`` or ``osumem/__main__.py``) running one of
    :data:`MEMORY_COMMANDS`; a variable the user set wins (then none is set), and so
    does ``--blas-threads 0``; a process that has NumPy already is left alone. The
    count is recorded in :data:`osumem.process.blas_threads_at_start`: every BLAS the
    process loads then starts with it, so the memory's calls skip looking the
    libraries up (about 5 ms of a cold query). Returns the count set, else ``None``."""
    program = PurePath(argv[0]) if argv else PurePath()
    ours = program.name == "osumem" or (program.name, program.parent.name) == (
        "__main__.py",
        "osumem",
    )
    if not ours or "numpy" in modules or any(v in environ for v in BLAS_THREAD_VARIABLES):
        return None
    words = [w for w in argv[1:] if not w.startswith("-")]
    if not words or words[0] not in MEMORY_COMMANDS:
        return None
    count = "1"  # the option's default
    for k, word in enumerate(argv):
        if word == "--blas-threads" and k + 1 < len(argv):
            count = argv[k + 1]
        elif word.startswith("--blas-threads="):
            count = word.partition("=")[2]
    if not count.isdigit() or int(count) == 0:
        return None  # 0: the library's own setting; a bad value: click says so
    for variable in BLAS_THREAD_VARIABLES:
        environ[variable] = count
    if environ is os.environ:
        osumem.process.blas_threads_at_start = int(count)
    return int(count)


blas_at_start(sys.argv, os.environ)

import click  # noqa: E402  (after the variable: nothing below may load NumPy first)

from osumem import __version__  # noqa: E402
from osumem.cli._common import LazyGroup, OSUMemGroup  # noqa: E402

__all__ = ["main"]

_CLI = "osumem.cli"

#: The memory, as an agent's tools use it, and the harness's own commands.
COMMANDS = {
    "ingest": f"{_CLI}.memory:ingest_cmd",
    "query": f"{_CLI}.memory:query_cmd",
    "check": f"{_CLI}.memory:check_cmd",
    "namespaces": f"{_CLI}.inspect:namespaces_cmd",
    "show": f"{_CLI}.inspect:show_cmd",
    "export": f"{_CLI}.inspect:export_cmd",
    "import": f"{_CLI}.inspect:import_cmd",
    "view": f"{_CLI}.inspect:view_cmd",
    "serve": f"{_CLI}.serve:serve_cmd",
    "methods": f"{_CLI}.bench:methods_cmd",
    "report": f"{_CLI}.report:report_cmd",
    "results": f"{_CLI}.report:results_cmd",
}
BENCH = {
    "synthetic": f"{_CLI}.bench:bench_synthetic",
    "taubench": f"{_CLI}.taubench:bench_taubench",
    "toolbench": f"{_CLI}.toolbench:bench_toolbench",
    "locomo": f"{_CLI}.locomo:bench_locomo",
    "compare": f"{_CLI}.compare:bench_compare",
    "efficiency": f"{_CLI}.report:bench_efficiency",
    "serve": f"{_CLI}.serve:bench_serve_cmd",
    "scale": f"{_CLI}.scale:bench_scale",
}
REPRODUCE = {
    "synthetic": f"{_CLI}.report:reproduce_synthetic",
    "taubench": f"{_CLI}.taubench:reproduce_taubench",
    "toolbench": f"{_CLI}.toolbench:reproduce_toolbench",
    "locomo": f"{_CLI}.locomo:reproduce_locomo",
}


@click.group(
    cls=OSUMemGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="osumem")
def main() -> None:
    """OSU-Mem: trajectory memory for LLM agents, and the harness that reproduces
    "When Does Overlap Help?" (OSU-Mem, arXiv 2606.28376).

    Run `osumem bench synthetic` for the paper's synthetic benchmark.
    """


@main.group(cls=LazyGroup, lazy=BENCH)
def bench() -> None:
    """Run a benchmark: methods × budgets, per-query rows, a summary table."""


@main.group("reproduce", cls=LazyGroup, lazy=REPRODUCE)
def reproduce() -> None:
    """Reproduce the paper's experiments: run, then write the report."""


if __name__ == "__main__":  # pragma: no cover
    main()
