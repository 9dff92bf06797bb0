"""The command line's face, pinned: the ``--help`` of every command path (walked from
the click tree, so a new command is covered without editing this file) and a few
error runs with their exit codes, compared byte for byte with
tests/data/cli_snapshot.txt.

A deliberate change of a flag, default or help text updates the snapshot with
``OSUMEM_UPDATE_SNAPSHOT=1 python -m pytest tests/cli/test_cli_snapshot.py`` (then review
the diff of the snapshot file).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import click
from click.testing import CliRunner

from osumem.cli import main

#: The list of registered methods changes as methods are added; its place is pinned.
AVAILABLE = re.compile(r"available: [^\n]*")
SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "cli_snapshot.txt"

LOG = (
    '[{"role": "user", "content": "Book flight AB123"},'
    ' {"role": "assistant", "content": "Booked AB123 for Ann"}]'
)


def command_paths(group: click.Group = main, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path below ``group`` (the group itself first), sorted."""
    paths = [prefix]
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the lazy ones too, imported here
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        if isinstance(cmd, click.Group):
            paths.extend(command_paths(cmd, (*prefix, name)))
        else:
            paths.append((*prefix, name))
    return paths


def error_runs(tmp: Path) -> list[list[str]]:
    """Error runs of the memory commands and the bench flag checks (none loads a model)."""
    store = str(tmp / "m.db")
    missing = str(tmp / "missing.db")
    return [
        ["query", "q", "--store", missing],
        ["query", "q"],
        ["query", "q", "--store", store, "--server", "http://127.0.0.1:1"],
        ["query", "q", "--store", store, "--budget", "0"],
        ["query", "q", "--store", store, "--budget", "x"],
        ["query", "q", "--store", store, "--method", "nope"],
        ["query", "q", "--store", store, "--set", "bad"],
        ["ingest", str(tmp / "log.json")],
        ["ingest", str(tmp / "log.json"), "--store", store, "--limit", "-1"],
        ["ingest", str(tmp / "log.json"), "--store", store, "--format", "nope"],
        ["check", "--store", missing],
        ["check"],
        ["serve"],
        ["serve", "--store", store, "--transport", "nope"],
        ["bench", "synthetic", "--budgets", "0"],
        ["bench", "synthetic", "--methods", "nope", "--budgets", "-1", "--set", "bad"],
        ["bench", "synthetic", "--jobs", "0"],
        ["bench", "taubench"],
        ["bench", "toolbench", "--data", str(tmp), "--methods", "nope"],
        ["bench", "scale", "--sizes", "x", "--dim", "8", "--queries", "1"],
        ["bench", "nope"],
        ["report", missing],
        ["reproduce", "synthetic"],
    ]


def render(tmp: Path) -> str:
    """Every help page and error run as one text (``tmp`` is written as ``<tmp>``)."""
    runner = CliRunner()
    parts = []
    for path in command_paths():
        r = runner.invoke(main, [*path, "--help"], prog_name="osumem", terminal_width=80)
        parts.append(f"$ osumem {' '.join((*path, '--help'))}\n[exit {r.exit_code}]\n{r.output}")
    (tmp / "log.json").write_text(LOG)
    setup = runner.invoke(
        main,
        ["ingest", str(tmp / "log.json"), "--store", str(tmp / "m.db"), "--encoder", "hashing"],
    )
    assert setup.exit_code == 0, setup.output
    for args in error_runs(tmp):
        r = runner.invoke(main, args, prog_name="osumem", terminal_width=80)
        shown = " ".join(args).replace(str(tmp), "<tmp>")
        parts.append(
            f"$ osumem {shown}\n[exit {r.exit_code}]\n--- stdout\n{r.stdout}--- stderr\n"
            + AVAILABLE.sub(
                "available: <the registered methods>", r.stderr.replace(str(tmp), "<tmp>")
            )
        )
    return "\n".join(parts)


def test_help_and_errors_match_the_snapshot(tmp_path: Path) -> None:
    text = render(tmp_path)
    if os.environ.get("OSUMEM_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.write_text(text, encoding="utf-8")
    expected = SNAPSHOT.read_text(encoding="utf-8")
    assert text == expected, "CLI help or errors changed; see the module docstring"


def test_every_command_path_is_in_the_snapshot() -> None:
    text = SNAPSHOT.read_text(encoding="utf-8")
    for path in command_paths():
        assert f"$ osumem {' '.join((*path, '--help'))}\n[exit 0]\n" in text
