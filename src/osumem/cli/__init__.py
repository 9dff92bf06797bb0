"""The ``osumem`` command line. Thin: parses flags, calls the library, prints.

This module holds the top-level group and says which command goes where; the
commands live in one module per family (:mod:`osumem.cli.memory`,
:mod:`osumem.cli.bench`, ...), their shared helpers in :mod:`osumem.cli._common`,
below every command module. Errors go to stderr with exit status 2; heavy libraries
are imported inside the commands, so ``osumem --help`` stays fast.
"""

from __future__ import annotations

import click

from osumem import __version__
from osumem.cli import bench as bench_commands
from osumem.cli import (
    compare,
    inspect,
    locomo,
    memory,
    report,
    scale,
    serve,
    taubench,
    toolbench,
)
from osumem.cli._common import OSUMemGroup

__all__ = ["main"]


@click.group(cls=OSUMemGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="osumem")
def main() -> None:
    """OSU-Mem: trajectory memory for LLM agents, and the harness that reproduces
    "When Does Overlap Help?" (OSU-Mem, arXiv 2606.28376).

    Run `osumem bench synthetic` for the paper's synthetic benchmark.
    """


@main.group()
def bench() -> None:
    """Run a benchmark: methods × budgets, per-query rows, a summary table."""


@main.group("reproduce")
def reproduce() -> None:
    """Reproduce the paper's experiments: run, then write the report."""


# The memory, as an agent's tools use it.
main.add_command(memory.ingest_cmd)
main.add_command(memory.query_cmd)
main.add_command(memory.check_cmd)
main.add_command(inspect.namespaces_cmd)
main.add_command(inspect.show_cmd)
main.add_command(inspect.export_cmd)
main.add_command(inspect.import_cmd)
main.add_command(inspect.view_cmd)
main.add_command(serve.serve_cmd)
main.add_command(bench_commands.methods_cmd)
main.add_command(report.report_cmd)
main.add_command(report.results_cmd)

bench.add_command(bench_commands.bench_synthetic)
bench.add_command(taubench.bench_taubench)
bench.add_command(toolbench.bench_toolbench)
bench.add_command(locomo.bench_locomo)
bench.add_command(compare.bench_compare)
bench.add_command(report.bench_efficiency)
bench.add_command(serve.bench_serve_cmd)
bench.add_command(scale.bench_scale)

reproduce.add_command(report.reproduce_synthetic)
reproduce.add_command(taubench.reproduce_taubench)
reproduce.add_command(toolbench.reproduce_toolbench)
reproduce.add_command(locomo.reproduce_locomo)


if __name__ == "__main__":  # pragma: no cover
    main()
