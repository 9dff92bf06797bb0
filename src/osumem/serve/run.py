"""Running the faces: MCP over stdio, or HTTP (JSON API + MCP) under uvicorn."""

from __future__ import annotations

from osumem.errors import ConfigError
from osumem.serve.auth import TokenTable, is_loopback
from osumem.serve.service import MemoryService


def run_stdio(service: MemoryService) -> None:
    """Serve MCP over stdin/stdout until the client closes the pipe."""
    import anyio

    from osumem.serve.mcp_app import build_mcp

    server = build_mcp(service)
    anyio.run(server.run_stdio_async)


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


def run_http(
    service: MemoryService,
    tokens: TokenTable,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    log_level: str = "warning",
    max_connections: int = 256,
) -> None:
    """Serve the HTTP JSON API with MCP at ``/mcp`` under uvicorn until interrupted."""
    import uvicorn

    from osumem.serve.http_app import build_app

    app = build_app(service, tokens, host=host)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        limit_concurrency=max_connections,
        timeout_graceful_shutdown=10,
        server_header=False,
    )
    uvicorn.Server(config).run()
