"""The HTTP face: a JSON API (FastAPI) over a
:class:`~osumem.serve.service.MemoryService`, with MCP's streamable HTTP endpoint
mounted at ``/mcp``.

Routes: ``POST /v1/namespaces/{ns}/messages``, ``POST /v1/namespaces/{ns}/retrieve``,
``GET /v1/namespaces``, ``DELETE /v1/namespaces/{ns}``, ``GET /healthz`` (no token),
``GET /openapi.json`` and ``GET /docs`` (no token; the schema holds no data). Every
other route needs ``Authorization: Bearer <token>`` when tokens are configured; a
token limited to namespaces gets 403 elsewhere. Bodies over the size limit get 413
before they are read whole.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from osumem import __version__
from osumem.errors import OSUMemError
from osumem.serve.auth import Grant, TokenTable
from osumem.serve.schemas import (
    AddRequest,
    AddResponse,
    DeleteResponse,
    NamespacesResponse,
    RetrieveRequest,
    RetrieveResponse,
    check_namespace_name,
    error_body,
    error_status,
)
from osumem.serve.service import MemoryService

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Paths served without a token.
PUBLIC_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect"})


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: Any = ()) -> None:
    import json

    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


class ForbiddenNamespace(Exception):
    """The request's token may not use the namespace it names (HTTP 403)."""


class LimitsAndAuth:
    """ASGI middleware in front of everything: the body size limit (413, checked on
    ``Content-Length`` and again while the body streams in) and the bearer token
    (401), whose grant it leaves in ``scope["osumem.grant"]``."""

    def __init__(self, app: ASGIApp, tokens: TokenTable, max_body_bytes: int) -> None:
        self.app = app
        self.tokens = tokens
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        limit = self.max_body_bytes
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _send_json(send, 413, _too_large(limit))
            return
        if self.tokens.enabled and scope["path"] not in PUBLIC_PATHS:
            grant = self.tokens.grant_for_header(headers.get("authorization"))
            if grant is None:
                refusal = {
                    "error": {
                        "type": "Unauthorized",
                        "message": "a valid 'Authorization: Bearer <token>' header is required",
                    }
                }
                await _send_json(send, 401, refusal, [(b"www-authenticate", b"Bearer")])
                return
            scope["osumem.grant"] = grant
        # Read the body here (it is bounded), so an oversized one is refused before any
        # route sees it, whether or not it came with a Content-Length.
        chunks, received, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > limit:
                await _send_json(send, 413, _too_large(limit))
                return
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later: only the disconnect message

        await self.app(scope, replay, send)


def _too_large(limit: int) -> dict[str, Any]:
    return {
        "error": {
            "type": "RequestTooLarge",
            "message": f"request body over the server's limit of {limit} bytes",
        }
    }


def build_app(
    service: MemoryService, tokens: TokenTable | None = None, *, host: str = "127.0.0.1"
) -> Any:
    """The ASGI application (FastAPI + the mounted MCP endpoint) for ``service``."""
    table = tokens or TokenTable()
    mcp_server = _mcp_routes(service, table, host)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with mcp_server.session_manager.run():
            yield

    app = FastAPI(
        title="OSU-Mem memory server",
        version=__version__,
        description="Trajectory memory for LLM agents: store chat messages per namespace, "
        "retrieve the steps that support a query under a token budget. MCP (streamable "
        "HTTP) is served at /mcp.",
        lifespan=lifespan,
        redoc_url=None,
    )
    app.router.routes.extend(mcp_server.routes)

    @app.exception_handler(OSUMemError)
    async def library_error(request: Request, exc: OSUMemError) -> JSONResponse:
        return JSONResponse(error_body(exc), status_code=error_status(exc))

    @app.exception_handler(ForbiddenNamespace)
    async def forbidden(request: Request, exc: ForbiddenNamespace) -> JSONResponse:
        return JSONResponse({"error": {"type": "Forbidden", "message": str(exc)}}, status_code=403)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ()))
            problems.append(f"{where}: {err.get('msg', 'invalid')}")
        body = {
            "error": {"type": "InvalidInputError", "message": "; ".join(problems)},
            "fields": [".".join(str(p) for p in e.get("loc", ())) for e in exc.errors()],
        }
        return JSONResponse(body, status_code=422)

    def grant_of(request: Request) -> Grant | None:
        return request.scope.get("osumem.grant")

    def allowed(request: Request, namespace: str) -> None:
        check_namespace_name(namespace)
        grant = grant_of(request)
        if grant is not None and not grant.allows(namespace):
            raise ForbiddenNamespace(f"this token may not use namespace {namespace!r}")

    @app.get("/healthz", tags=["service"])
    async def healthz() -> dict[str, Any]:
        """Liveness: the store is open and the encoder loaded (no token needed)."""
        return {
            "status": "ok",
            "version": __version__,
            "method": service.method,
            "encoder": service.encoder_id,
            "model": service.encoder_id,  # deprecated name of "encoder", for one release
        }

    @app.post(
        "/v1/namespaces/{namespace:path}/messages", response_model=AddResponse, tags=["memory"]
    )
    async def add_messages(namespace: str, body: AddRequest, request: Request) -> AddResponse:
        """Store OpenAI-format chat messages in a namespace. Answers after the steps are
        committed to the store; invalid messages are rejected whole (422 naming the
        message and field)."""
        allowed(request, namespace)
        result = await service.aadd_messages(
            namespace,
            body.messages,
            source=body.source,
            prefix_namespace=body.prefix_namespace,
            hold_open_calls=body.hold_open_calls,
            on_duplicate=body.on_duplicate,
        )
        return AddResponse.of(result)

    @app.post(
        "/v1/namespaces/{namespace:path}/retrieve", response_model=RetrieveResponse, tags=["memory"]
    )
    async def retrieve(namespace: str, body: RetrieveRequest, request: Request) -> JSONResponse:
        """The past steps of a namespace that best support the query, under the budget:
        a rendered context block and the structured steps."""
        allowed(request, namespace)
        result = await service.aretrieve(
            body.query, body.budget, namespace=namespace, method=body.method
        )
        # the response model documents the shape; the dict is built straight from the
        # result (no second validation pass on the hot path)
        return JSONResponse(result.to_dict() | {"rendered": result.render()})

    @app.get("/v1/namespaces", response_model=NamespacesResponse, tags=["memory"])
    async def list_namespaces(request: Request) -> NamespacesResponse:
        """The namespaces holding steps (those this token may use)."""
        grant = grant_of(request)
        names = await service.anamespaces()
        if grant is not None:
            names = [n for n in names if grant.allows(n)]
        return NamespacesResponse(namespaces=names)

    @app.delete("/v1/namespaces/{namespace:path}", response_model=DeleteResponse, tags=["memory"])
    async def delete_namespace(namespace: str, request: Request) -> DeleteResponse:
        """Delete every step of a namespace (one transaction)."""
        allowed(request, namespace)
        n = await service.adelete_namespace(namespace)
        return DeleteResponse(namespace=namespace, deleted_steps=n)

    return LimitsAndAuth(app, table, service.limits.max_body_bytes)


def _mcp_routes(service: MemoryService, tokens: TokenTable, host: str) -> Any:
    """The MCP server with its streamable HTTP app built (stateless, JSON answers)."""
    from osumem.serve.mcp_app import build_mcp

    server = build_mcp(service, tokens)
    starlette_app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        max_request_body_size=service.limits.max_body_bytes,
        host=host,
    )

    class Routes:
        routes = starlette_app.routes
        session_manager = server.session_manager

    return Routes
