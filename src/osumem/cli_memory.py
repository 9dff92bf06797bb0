"""``osumem ingest`` and ``osumem query``: the agent memory from the command line.

LOG.json may hold one chat log (a list of OpenAI-format messages, or an object with a
``messages`` or ``traj`` list) or a list of such logs (a tau-bench results file is a
list of objects with ``traj``); ``.jsonl`` files hold one log per line. Every log is
one add (one transaction) into the namespace.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from osumem.cli import handle_errors

DEFAULT_NAMESPACE = "default"  # same as osumem.memory.DEFAULT_NAMESPACE (kept light here)


def register(main: click.Group, bench: click.Group) -> None:
    """Add the memory commands to the ``osumem`` group."""
    main.add_command(ingest_cmd)
    main.add_command(query_cmd)


@click.command("ingest")
@click.argument("log", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--store",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="SQLite memory store (created if missing).",
)
@click.option(
    "--server",
    default=None,
    metavar="URL",
    help="Send the logs to a running `osumem serve --transport http` instead of --store "
    "(token from OSUMEM_TOKEN).",
)
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True, help="Target episode.")
@click.option(
    "--model",
    default=None,
    help="Encoder: 'sbert' (default for a new store), 'hashing[:d<dim>]' or a "
    "sentence-transformers model directory. An existing store keeps its own.",
)
@click.option("--limit", type=int, default=None, help="Ingest only the first N logs of the file.")
@click.option(
    "--prefix/--no-prefix",
    "prefix",
    default=None,
    help="Prefix entities and tool signatures with each log's source name "
    "(default: on when the file holds several logs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@handle_errors
def ingest_cmd(
    log: Path,
    store: Path | None,
    server: str | None,
    namespace: str,
    model: str | None,
    limit: int | None,
    prefix: bool | None,
    as_json: bool,
) -> None:
    """Add the chat log(s) in LOG to a memory store."""
    from osumem.cli_serve import remote_ingest, store_or_server
    from osumem.ingest.openai_chat import read_log
    from osumem.memory import Memory

    store_or_server(store, server)
    logs = read_log(log)
    if limit is not None:
        logs = logs[: max(0, limit)]
    several = len(logs) > 1
    use_prefix = several if prefix is None else prefix
    if server is not None:
        remote_ingest(server, logs, namespace, use_prefix, model, as_json)
        return
    assert store is not None
    added = 0
    with Memory.open(store, encoder=model) as mem:
        for i, messages in enumerate(logs):
            source = f"{namespace}/{i}" if several else namespace
            ids = mem.add_messages(
                messages,
                namespace=namespace,
                source=source,
                prefix_namespace=use_prefix,
                hold_open_calls=False,
            )
            added += len(ids)
        summary: dict[str, Any] = {
            "store": str(store),
            "namespace": namespace,
            "logs": len(logs),
            "steps_added": added,
            "steps_in_namespace": mem.n_steps(namespace),
            "model": mem.store.model_id,
        }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(
            f"ingested {summary['logs']} log(s), {added} steps into namespace {namespace!r} "
            f"of {store} ({summary['steps_in_namespace']} steps there; model {summary['model']})"
        )


@click.command("query")
@click.argument("text")
@click.option(
    "--store",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="SQLite memory store made by `osumem ingest`.",
)
@click.option(
    "--server",
    default=None,
    metavar="URL",
    help="Ask a running `osumem serve --transport http` instead of --store (no model "
    "load per call; token from OSUMEM_TOKEN).",
)
@click.option("--budget", type=int, default=256, show_default=True, help="Token budget.")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True, help="Episode.")
@click.option("--method", default="osumem", show_default=True, help="Retrieval method.")
@click.option(
    "--set",
    "params",
    multiple=True,
    metavar="PARAM=VALUE",
    help="A parameter of the method (e.g. max_memberships=1). Repeatable.",
)
@click.option("--before", type=int, default=None, help="Only steps at positions < BEFORE.")
@click.option("--json", "as_json", is_flag=True, help="Print the selected steps as JSON.")
@handle_errors
def query_cmd(
    text: str,
    store: Path | None,
    server: str | None,
    budget: int,
    namespace: str,
    method: str,
    params: tuple[str, ...],
    before: int | None,
    as_json: bool,
) -> None:
    """Print the context retrieved from a memory store for TEXT."""
    from osumem.cli_serve import remote_query, store_or_server
    from osumem.errors import ConfigError, DataFileError
    from osumem.memory import Memory

    store_or_server(store, server)
    if server is not None:
        remote_query(server, text, budget, namespace, method, params, before, as_json)
        return
    assert store is not None
    if not store.is_file():
        raise DataFileError(f"memory store not found: {store}")
    overrides: dict[str, str] = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects PARAM=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    with Memory.open(store, method=method, params=overrides or None, budget=budget) as mem:
        if mem.n_steps(namespace) == 0:
            click.echo(
                f"osumem: note: namespace {namespace!r} holds no steps; namespaces in "
                f"{store}: {mem.namespaces()}",
                err=True,
            )
        result = mem.retrieve(text, budget, namespace=namespace, before=before)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(result.render())
