"""``osumem query --server`` and ``osumem ingest --server``: the local commands' remote
faces. Kept apart from :mod:`osumem.cli.serve` so that a local ``osumem query`` does
not build the serving commands (a cold query's start-up is an agent's wait)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from osumem.cli._common import echo_ingested


def store_or_server(store: Path | str | None, server: str | None) -> None:
    """Exactly one of ``--store`` and ``--server``."""
    from osumem.errors import ConfigError

    if (store is None) == (server is None):
        raise ConfigError("give either --store PATH or --server URL")


def remote_ingest(
    server: str,
    logs: list[Any],
    namespace: str,
    prefix: bool,
    encoder: str | None,
    as_json: bool,
    on_duplicate: str = "skip",
) -> None:
    """``osumem ingest --server``: one add per log, each acknowledged after it commits; a
    log the namespace already holds is handled by ``on_duplicate`` as locally."""
    from osumem.errors import ConfigError
    from osumem.serve.client import MemoryClient

    if encoder is not None:
        raise ConfigError("--encoder: a server encodes with its own encoder; drop --encoder")
    several = len(logs) > 1
    added, in_namespace = 0, 0
    with MemoryClient(server) as client:
        health = client.health()
        encoder_id = health.get("encoder", health.get("model", ""))
        for i, messages in enumerate(logs):
            answer = client.add_messages(
                messages,
                namespace=namespace,
                source=f"{namespace}/{i}" if several else namespace,
                prefix_namespace=prefix,
                hold_open_calls=False,
                on_duplicate=on_duplicate,
            )
            added += len(answer["step_ids"])
            in_namespace = int(answer["steps_in_namespace"])
    summary = {
        "server": server,
        "namespace": namespace,
        "logs": len(logs),
        "steps_added": added,
        "steps_in_namespace": in_namespace,
        "encoder": encoder_id,
        "model": encoder_id,  # deprecated name of "encoder", for one release
    }
    echo_ingested(summary, server, as_json)


def remote_query(
    server: str,
    text: str,
    budget: int,
    namespace: str,
    method: str,
    params: tuple[str, ...],
    before: int | None,
    as_json: bool,
    explain: bool = False,
) -> None:
    """``osumem query --server``: print the server's answer as the local query would."""
    from osumem.errors import ConfigError
    from osumem.serve.client import MemoryClient

    if params:
        raise ConfigError("--set: a server uses its methods' settings; drop --set")
    if before is not None:
        raise ConfigError("--before is answered from a local --store only")
    with MemoryClient(server) as client:
        answer = client.retrieve(text, budget, namespace=namespace, method=method, explain=explain)
    if as_json:
        click.echo(json.dumps(answer.to_dict(explain=explain), indent=2, ensure_ascii=False))
    else:
        click.echo(answer.render())
        if explain:
            click.echo(answer.explain().render())
