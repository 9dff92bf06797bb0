"""``--llm``: the LLM evidence-selection stage on ``osumem bench taubench`` and
``osumem reproduce taubench`` (parsing and printing only; the stage is
:mod:`osumem.bench.llm_stage`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

LLM_HELP = (
    "Also run the LLM evidence-selection stage on Flat and OSU-Mem: 'local' (the "
    "embedded SmolLM2-135M-Instruct, offline), 'local:FILE.gguf', or 'openai:MODEL' "
    "(OSUMEM_LLM_BASE_URL, OSUMEM_LLM_API_KEY). Answers are cached in "
    "$OSUMEM_CACHE_DIR/llm.db."
)


def llm_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--llm SPEC`` option."""
    return click.option("--llm", default=None, metavar="SPEC", help=LLM_HELP)(fn)


def bench_llm(
    llm: str,
    rows: Any,
    episodes: Sequence[tuple[int, Any]],
    *,
    methods: str,
    overrides: dict[str, dict[str, str]],
    out: Path | None,
    name: str,
    as_json: bool,
    quiet: bool,
) -> None:
    """After ``bench taubench``: score the stage, rewrite the rows with its columns,
    print the per-cell section (on stderr with ``--json``)."""
    from osumem.bench.llm_stage import run_stage_for_cli
    from osumem.evaluate.runner import parse_method_runs, split_methods, write_results
    from osumem.report.llm_section import llm_section

    runs = parse_method_runs(split_methods(methods), overrides)
    rows, info = run_stage_for_cli(llm, rows, episodes, runs, progress=not quiet)
    if out is not None:
        meta_path = Path(out) / f"{name}.json"
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        path = write_results(out, rows, {**meta, "llm": info}, name=name)
        click.echo(f"rows with LLM columns written to {path}", err=True)
    click.echo(llm_section(rows, info=info), err=as_json)


def reproduce_llm(
    llm: str,
    *,
    data: Path,
    out: Path,
    seeds: list[int],
    episodes: int | None,
    build: Callable[..., Any],
    encoder: str,
    cache: Path | None,
    n_permutations: int,
    quiet: bool,
) -> dict[str, Any]:
    """After ``reproduce taubench``: score the stage on the main run's Flat and OSU-Mem
    rows at B = 256, rewrite ``taubench.parquet`` and append the section to
    ``report.md``; returns the stage's run information."""
    from osumem.bench.llm_stage import run_stage_for_cli
    from osumem.bench.taubench import TauBenchConfig
    from osumem.evaluate.runner import parse_method_runs, read_results, write_results
    from osumem.report.llm_section import llm_section

    cfg = TauBenchConfig()
    if episodes is not None:
        cfg = cfg.replace(n_episodes=episodes)
    eps, _ = build(data, cfg, seeds, encoder=encoder, cache=cache)
    rows = read_results(Path(out) / "taubench.parquet")
    runs = parse_method_runs(["flat", "osumem"])
    rows, info = run_stage_for_cli(llm, rows, eps, runs, budgets=[256], progress=not quiet)
    meta_path = Path(out) / "taubench.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    write_results(out, rows, {**meta, "llm": info}, name="taubench")
    section = llm_section(rows, info=info, n_permutations=n_permutations)
    with (Path(out) / "report.md").open("a", encoding="utf-8") as fh:
        fh.write("\n" + section)
    return info
