"""``osumem ingest`` and ``osumem query``: the agent memory from the command line.

LOG.json may hold one chat log (a list of messages, or an object with a ``messages``
or ``traj`` list; OpenAI, legacy OpenAI function calling, Anthropic Messages, or one
ToolBench DFS answer file, see ``--format``) or a list of such logs (a tau-bench results file is a
list of objects with ``traj``); ``.jsonl`` files hold one log per line. Every log is
one add into the namespace, and the whole file is one transaction: either every log
of the file is stored or none is. A log already in the namespace is skipped by default
(``--on-duplicate``). ``osumem check`` verifies a store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from osumem.cli._common import (
    STORE_ENCODER_HELP,
    blas_setting,
    blas_threads_option,
    budget_option,
    echo_ingested,
    encoder_option,
    handle_errors,
    json_option,
    method_option,
    namespace_option,
    require_store,
    server_option,
    shown_store,
    store_option,
)


@click.command("ingest")
@click.argument("log", type=click.Path(dir_okay=False, path_type=Path))
@store_option(
    default=None, help="Memory store: a SQLite file or a postgresql:// URL (created if missing)."
)
@server_option(
    help="Send the logs to a running `osumem serve --transport http` instead of --store "
    "(token from OSUMEM_TOKEN)."
)
@namespace_option(help="Target episode.")
@encoder_option(default=None, help=STORE_ENCODER_HELP)
@click.option("--limit", type=int, default=None, help="Ingest only the first N logs of the file.")
@click.option(
    "--prefix/--no-prefix",
    "prefix",
    default=None,
    help="Prefix entities and tool signatures with each log's source name "
    "(default: on when the file holds several logs).",
)
@click.option(
    "--format",
    "log_format",
    type=click.Choice(["auto", "openai", "openai-legacy", "anthropic", "toolbench-dfs"]),
    default="auto",
    show_default=True,
    help="Log format (auto: read from the log's fields).",
)
@click.option(
    "--on-duplicate",
    type=click.Choice(["skip", "error", "append"]),
    default="skip",
    show_default=True,
    help="A log the namespace already holds (same content): skip it, fail, or add it again.",
)
@click.option(
    "--busy-timeout",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for another writer's lock before giving up.",
)
@blas_threads_option()
@json_option("Print the summary as JSON.")
@handle_errors
def ingest_cmd(
    log: Path,
    store: Path | str | None,
    server: str | None,
    namespace: str,
    encoder: str | None,
    limit: int | None,
    prefix: bool | None,
    log_format: str,
    on_duplicate: str,
    busy_timeout: float,
    blas_threads: int,
    as_json: bool,
) -> None:
    """Add the chat log(s) in LOG to a memory store (all of the file, or nothing)."""
    from osumem.cli.remote import remote_ingest, store_or_server
    from osumem.errors import ConfigError, InvalidInputError, OSUMemError
    from osumem.ingest import read_logs, skip_summary
    from osumem.memory import Memory

    store_or_server(store, server)
    if limit is not None and limit < 0:
        raise ConfigError(f"--limit: expected a number of logs >= 0, got {limit}")
    try:
        normalized = read_logs(log, log_format)
    except UnicodeError as exc:
        raise InvalidInputError(f"{log}: not UTF-8 text ({getattr(exc, 'reason', exc)})") from None
    except RecursionError:
        raise InvalidInputError(f"{log}: JSON nested too deeply") from None
    if limit is not None:
        normalized = normalized[:limit]  # the skip note counts the logs ingested only
    logs = [list(n.messages) for n in normalized]
    several = len(logs) > 1
    use_prefix = several if prefix is None else prefix
    if server is not None:
        remote_ingest(server, logs, namespace, use_prefix, encoder, as_json, on_duplicate)
        return
    assert store is not None  # store_or_server checked that one of them is given
    added = skipped = 0
    mem = Memory.open(
        store, encoder=encoder, timeout=busy_timeout, blas_threads=blas_setting(blas_threads)
    )
    created = mem.store.created
    try:
        with mem.transaction():
            for i, messages in enumerate(logs):
                source = f"{namespace}/{i}" if several else namespace
                try:
                    if on_duplicate == "skip" and mem.contains_log(messages, namespace=namespace):
                        skipped += 1
                        continue
                    ids = mem.add_messages(
                        messages,
                        namespace=namespace,
                        source=source,
                        prefix_namespace=use_prefix,
                        hold_open_calls=False,
                        on_duplicate=on_duplicate,
                    )
                except OSUMemError as exc:
                    what = f"log {i} of {log}" if several else str(log)
                    detail = " ".join(str(exc).split())  # one line, whatever the log held
                    raise _renamed(
                        exc, f"{what}: {detail}; nothing from {log} was stored"
                    ) from None
                added += len(ids)
        summary: dict[str, Any] = {
            "store": shown_store(store),
            "namespace": namespace,
            "logs": len(logs),
            "logs_skipped_as_duplicates": skipped,
            "steps_added": added,
            "steps_in_namespace": mem.n_steps(namespace),
            "encoder": mem.store.encoder_id,
            "model": mem.store.encoder_id,  # deprecated name of "encoder", for one release
        }
    except BaseException:
        mem.close()
        if created:
            mem.store.discard()  # a failed first ingest leaves no file
        raise
    mem.close()
    if skip_summary(normalized):  # after success: an error stays the only line
        click.echo(f"osumem: note: {skip_summary(normalized)}", err=True)
    echo_ingested(summary, shown_store(store), as_json)


def _renamed(exc: Exception, message: str) -> Exception:
    """``exc``'s type with ``message`` (falls back to the base error type)."""
    from osumem.errors import OSUMemError

    try:
        return type(exc)(message)
    except TypeError:  # an error type whose constructor takes other arguments
        return OSUMemError(message)


@click.command("check")
@store_option(
    required=True,
    help="Memory store to verify, a SQLite file or a postgresql:// URL (opened read-only).",
)
@json_option("Print the summary as JSON.")
@handle_errors
def check_cmd(store: Path | str, as_json: bool) -> None:
    """Verify a memory store: SQLite pages, tables, meta, positions, embeddings (size,
    finite values), JSON columns and held messages. Exit 2 with one line naming every
    problem found."""
    from osumem.memory import open_store

    require_store(store)
    st = open_store(store, read_only=True)
    try:
        st.check()
        namespaces = st.namespaces()
        summary = {
            "store": shown_store(store),
            "ok": True,
            "namespaces": len(namespaces),
            "steps": sum(st.n_steps(ns) for ns in namespaces),
            "encoder": st.encoder_id,
            "model": st.encoder_id,  # deprecated name of "encoder", for one release
        }
    finally:
        st.close()
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(
            f"{shown_store(store)}: ok ({summary['steps']} steps in {summary['namespaces']} namespace(s), "
            f"encoder {summary['encoder'] or 'none yet'})"
        )


@click.command("query")
@click.argument("text")
@store_option(
    default=None, help="Memory store made by `osumem ingest`: a SQLite file or a postgresql:// URL."
)
@server_option(
    help="Ask a running `osumem serve --transport http` instead of --store (no model "
    "load per call; token from OSUMEM_TOKEN)."
)
@budget_option(help="Token budget.")
@namespace_option(help="Episode.")
@method_option(help="Retrieval method.")
@click.option(
    "--set",
    "params",
    multiple=True,
    metavar="PARAM=VALUE",
    help="A parameter of the method (e.g. max_memberships=1). Repeatable.",
)
@click.option("--before", type=int, default=None, help="Only steps at positions < BEFORE.")
@click.option(
    "--explain",
    is_flag=True,
    help="Also say why each step is there (cosine, lexical score, the unit that brought it "
    "in, coarse-stage ranks) and what the budget left out.",
)
@blas_threads_option()
@json_option("Print the selected steps as JSON.")
@handle_errors
def query_cmd(
    text: str,
    store: Path | str | None,
    server: str | None,
    budget: int,
    namespace: str,
    method: str,
    params: tuple[str, ...],
    before: int | None,
    explain: bool,
    blas_threads: int,
    as_json: bool,
) -> None:
    """Print the context retrieved from a memory store for TEXT."""
    from osumem.cli.remote import remote_query, store_or_server
    from osumem.errors import ConfigError
    from osumem.memory import Memory

    store_or_server(store, server)
    if server is not None:
        remote_query(server, text, budget, namespace, method, params, before, as_json, explain)
        return
    assert store is not None
    require_store(store)
    overrides: dict[str, str] = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects PARAM=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    with Memory.open(
        store,
        method=method,
        params=overrides or None,
        budget=budget,
        read_only=True,
        blas_threads=blas_setting(blas_threads),
    ) as mem:
        result = mem.retrieve(text, budget, namespace=namespace, before=before)
        if mem.n_steps(namespace) == 0:  # after retrieve: a bad query is one error line
            click.echo(
                f"osumem: note: namespace {namespace!r} holds no steps; namespaces in "
                f"{shown_store(store)}: {mem.namespaces()}",
                err=True,
            )
        answer = result.to_dict(explain=explain)  # explained while the memory is open
    if as_json:
        click.echo(json.dumps(answer, indent=2, ensure_ascii=False))
    else:
        click.echo(result.render())
        if explain:
            click.echo(result.explain().render())
