"""``osumem bench scale``: build time, memory and latency as the memory grows."""

from __future__ import annotations

from pathlib import Path

import click

from osumem.cli._common import budget_option, handle_errors, out_dir_option


@click.command("scale")
@click.option(
    "--sizes",
    default="1000,10000,100000",
    show_default=True,
    help="Comma-separated memory sizes (steps).",
)
@click.option("--large", is_flag=True, help="Also measure 1,000,000 steps.")
@click.option("--dim", default=384, show_default=True, help="Embedding dimension.")
@click.option(
    "--methods",
    default=None,
    help="Comma-separated methods to time (default: osumem, flat and "
    "osumem_adaptive when registered); an HNSW top-k reference is always added.",
)
@budget_option(help="Token budget.")
@click.option("--queries", default=100, show_default=True, help="Retrieves per size.")
@click.option(
    "--agent-steps",
    default=1000,
    show_default=True,
    help="Add-one-step-then-retrieve rounds per method and size (p50, p99 and max "
    "of add, retrieve and both).",
)
@click.option(
    "--agent-seconds",
    default=60.0,
    show_default=True,
    help="Stop a method's agent rounds after this much CPU time.",
)
@click.option(
    "--agent-max",
    default=100000,
    show_default=True,
    help="Largest size at which the agent pattern is timed.",
)
@click.option(
    "--memory-max",
    default=10000,
    show_default=True,
    help="Largest size also timed through the agent Memory API (0: never).",
)
@click.option(
    "--bulk-sizes",
    default="",
    help="Comma-separated sizes ingested in one add each, then the first retrieve "
    "timed (agent Memory API, hashing encoder).",
)
@click.option(
    "--bulk-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A tau-bench results file whose real step texts the bulk ingests use "
    "(repeated up to the size); default: generated texts.",
)
@click.option("--seed", default=0, show_default=True, help="Data and retriever seed.")
@out_dir_option(
    default=Path("scale-results"),
    show_default=True,
    help="Directory for scale.json, scale.md and scale.png.",
)
@handle_errors
def bench_scale(
    sizes: str,
    large: bool,
    dim: int,
    methods: str | None,
    budget: int,
    queries: int,
    agent_steps: int,
    agent_seconds: float,
    agent_max: int,
    memory_max: int,
    bulk_sizes: str,
    bulk_file: Path | None,
    seed: int,
    out: Path,
) -> None:
    """Scale: build CPU time and peak extra memory, retrieve p50/p99/max and the
    agent pattern (add one step, then retrieve: p50/p99/max of each) for memories
    of growing size, on seeded synthetic data, with an HNSW top-k reference and a
    plain sqlite3 insert (the add floor) measured in the same run; optionally the
    first retrieve after a bulk ingest. Times are CPU time of this process; compare
    the ratios."""
    from osumem.bench.scale import ScaleConfig, markdown, run_scale, write
    from osumem.errors import ConfigError
    from osumem.retrieve.registry import available

    try:
        size_list = [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError as exc:
        raise ConfigError(f"--sizes: expected integers, got {sizes!r}") from exc
    try:
        bulk_list = [int(s) for s in bulk_sizes.split(",") if s.strip()]
    except ValueError as exc:
        raise ConfigError(f"--bulk-sizes: expected integers, got {bulk_sizes!r}") from exc
    if large and 1_000_000 not in size_list:
        size_list.append(1_000_000)
    if methods is None:
        names = ["osumem", "flat"] + [m for m in ("osumem_adaptive",) if m in available()]
    else:
        names = [m.strip() for m in methods.split(",") if m.strip()]
    cfg = ScaleConfig(
        sizes=tuple(size_list),
        dim=dim,
        methods=tuple(names),
        budget=budget,
        queries=queries,
        agent_steps=agent_steps,
        agent_seconds=agent_seconds,
        agent_max=agent_max,
        memory_max=memory_max,
        bulk_sizes=tuple(bulk_list),
        bulk_file="" if bulk_file is None else str(bulk_file),
        seed=seed,
    )
    rows = run_scale(cfg, log=lambda line: click.echo(line, err=True))
    paths = write(rows, cfg, out)
    click.echo(markdown(rows))
    click.echo(f"wrote {paths['json']}, {paths['md']}, {paths['png']}", err=True)
