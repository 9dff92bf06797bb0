"""Running the faces: MCP over stdio, or HTTP (JSON API + MCP) under uvicorn."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from osumem.errors import ConfigError
from osumem.serve.auth import TokenTable, is_loopback
from osumem.serve.connection_limits import (
    BODY_TIMEOUT,
    HEADER_TIMEOUT,
    HTTP_PROTOCOLS,
    MAX_CONNECTIONS,
    MAX_PER_CLIENT,
)
from osumem.serve.connections import ConnectionGuard, guarded_protocol
from osumem.serve.service import MemoryService


class ServeStopped(KeyboardInterrupt):
    """A stop asked for by a signal (SIGTERM); unwinds like Ctrl-C, so every ``with``
    block closes (requests finish, the store is snapshotted and checkpointed)."""


@dataclass
class StopSignal:
    """The signal that stopped the server (``None``: it was not stopped by one)."""

    name: str | None = None


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopSignal]:
    """Treat SIGTERM as SIGINT inside the block: either unwinds the block (closing
    what it opened) and the block ends normally, saying which signal it was. A second
    SIGTERM while closing kills the process as the default action does."""
    stopped = StopSignal()

    def on_term(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one forces
        raise ServeStopped("SIGTERM")

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield stopped
    except ServeStopped:
        stopped.name = "SIGTERM"
    except KeyboardInterrupt:
        stopped.name = "SIGINT"
    finally:
        with contextlib.suppress(ValueError):  # not the main thread
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def frozen_start() -> Iterator[None]:
    """Serve inside this block: the garbage of the process's start is collected, then
    every object alive now (the ~300 imported modules, the app, the opened store) is
    left out of later collections (``gc.freeze``), and put back when the block ends.

    A full collection stops every thread of the process while it walks every tracked
    object; ``osumem serve`` under load paused 73–80 ms in each of its full
    collections, mostly walking objects made at the start that live as long as the
    process (10–13 ms with them frozen; ``benchmarks/serve_gc_pauses.py``).
    Frozen objects are still freed by reference counting. They are put back before
    the process exits: with a daemon thread still running, a frozen interpreter's
    shutdown can crash (see ``osumem.cli._common.freeze_at_exit``)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_stdio(service: MemoryService) -> None:
    """Serve MCP over stdin/stdout until the client closes the pipe."""
    import anyio

    from osumem.serve.mcp_app import build_mcp, serve_stdio

    server = build_mcp(service)
    with frozen_start():
        anyio.run(serve_stdio, server)


def check_http_security(host: str, tokens: TokenTable, no_auth: bool) -> None:
    """Refuse an HTTP face that anyone could use: without a token it must be asked for
    explicitly (``no_auth``) and bind to a loopback address."""
    if tokens.enabled and no_auth:
        raise ConfigError("--no-auth given, but tokens are configured; drop one of them")
    if tokens.enabled:
        return
    if not no_auth:
        raise ConfigError(
            "the HTTP face needs a bearer token: set OSUMEM_TOKEN or give --token-file "
            "(or --no-auth on a loopback address)"
        )
    if not is_loopback(host):
        raise ConfigError(
            f"--host {host} is not a loopback address: a token is required there "
            "(OSUMEM_TOKEN or --token-file)"
        )


@dataclass(frozen=True, kw_only=True)
class HttpSettings:
    """How the HTTP face guards itself (see :mod:`osumem.serve.connections`,
    :mod:`osumem.serve.hosts` and :class:`osumem.serve.http_app.LimitsAndAuth`)."""

    allowed_hosts: tuple[str, ...] = ()
    header_timeout: float = HEADER_TIMEOUT
    body_timeout: float = BODY_TIMEOUT
    max_connections: int = MAX_CONNECTIONS
    max_per_client: int = MAX_PER_CLIENT
    #: uvicorn's HTTP protocol: ``"auto"`` (httptools when installed, else h11, as
    #: uvicorn picks), ``"httptools"`` or ``"h11"``
    protocol: str = "auto"

    def __post_init__(self) -> None:
        if self.protocol not in HTTP_PROTOCOLS:
            raise ConfigError(
                f"--http-protocol: expected one of {', '.join(HTTP_PROTOCOLS)}; "
                f"got {self.protocol!r}"
            )
        if self.protocol == "httptools":
            try:
                import httptools  # noqa: F401
            except ImportError:
                raise ConfigError(
                    "--http-protocol httptools: httptools is not installed "
                    "(pip install 'osumem[serve]')"
                ) from None
        for name in ("header_timeout", "body_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(
                    f"--{name.replace('_', '-')}: expected seconds > 0, got {value!r}"
                )
        for name, flag in (
            ("max_connections", "max-connections"),
            ("max_per_client", "max-connections-per-client"),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"--{flag}: expected a number >= 1, got {value!r}")


def _room_for(connections: int) -> int:
    """Raise the open-file limit so ``connections`` sockets fit; where the hard limit
    is lower, the number of connections that fit (said on stderr)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = connections + 64  # the store, the encoder, the listening socket, ...
    if soft == resource.RLIM_INFINITY or soft >= need:
        return connections
    if hard != resource.RLIM_INFINITY and hard < need:
        fit = max(hard - 64, 1)
        print(
            f"osumem serve: note: the open-file limit is {hard}; serving at most {fit} "
            f"connections instead of {connections} (raise it with ulimit -n)",
            file=sys.stderr,
        )
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return fit
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return connections


def run_http(
    service: MemoryService,
    tokens: TokenTable,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    log_level: str = "warning",
    settings: HttpSettings | None = None,
    sockets: list[socket.socket] | None = None,
) -> None:
    """Serve the HTTP JSON API with MCP at ``/mcp`` under uvicorn until interrupted,
    behind a :class:`~osumem.serve.connections.ConnectionGuard`; on ``sockets`` (bound
    and listening, shared with other worker processes) instead of binding ``host`` and
    ``port``."""
    import uvicorn

    from osumem.serve.http_app import build_app

    cfg = settings or HttpSettings()
    max_connections = _room_for(cfg.max_connections)
    app = build_app(
        service, tokens, host=host, allowed_hosts=cfg.allowed_hosts, body_timeout=cfg.body_timeout
    )
    guard = ConnectionGuard(
        header_timeout=cfg.header_timeout,
        max_connections=max_connections,
        max_per_client=min(cfg.max_per_client, max_connections),
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=guarded_protocol(guard, cfg.protocol),  # bounds connections: no uvicorn limit
        timeout_graceful_shutdown=10,
        server_header=False,
    )
    server = uvicorn.Server(config)
    with frozen_start():
        server.run(sockets=sockets)


#: Seconds a stopped worker process gets to finish its requests and close its store
#: before it is killed.
WORKER_STOP_S = 30.0


def run_workers(
    count: int,
    host: str,
    port: int,
    target: Callable[[dict[str, Any], socket.socket, int, int], None],
    params: dict[str, Any],
) -> tuple[str | None, list[int]]:
    """Bind ``host:port`` once and run ``count`` worker processes on it (started
    fresh, ``spawn``: each opens its own store connection and memory), each as
    ``target(params, sock, index, count)``; the kernel hands each new connection to
    one of them. Returns when a signal stops the parent (SIGINT or SIGTERM: every
    worker is asked to stop, as a single server is, and waited for) or when a worker
    ends on its own (the others are stopped too): the signal's name, or ``None``, and
    the workers' exit codes."""
    import multiprocessing
    from multiprocessing.connection import wait

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=2048)
    ctx = multiprocessing.get_context("spawn")
    procs: list[Any] = []
    stop: str | None = None
    try:
        with stop_on_signals() as stopped:
            try:
                for i in range(count):
                    proc = ctx.Process(
                        target=target,
                        args=(params, sock, i, count),
                        name=f"osumem-serve-{i + 1}",
                    )
                    proc.start()
                    procs.append(proc)
            finally:
                sock.close()  # the workers hold it
            wait([proc.sentinel for proc in procs])  # until one ends or a signal comes
        stop = stopped.name
    finally:
        # the parent's stop signal, once, to every worker (each stops as a single
        # server does: its requests finished, its store closed); SIGTERM otherwise
        forward = signal.SIGINT if stop == "SIGINT" else signal.SIGTERM
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, forward)
        for proc in procs:
            proc.join(WORKER_STOP_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
    return stop, [int(proc.exitcode or 0) for proc in procs]
