"""The HTTP face: a JSON API (FastAPI) over a
:class:`~osumem.serve.service.MemoryService`, with MCP's streamable HTTP endpoint
mounted at ``/mcp``.

Routes: ``POST /v1/namespaces/{ns}/messages``, ``POST /v1/namespaces/{ns}/text`` (one
plain-text turn), ``POST /v1/namespaces/{ns}/retrieve`` (``"explain": true`` adds the
explanation, ``"filter"`` keeps only the steps that pass), ``POST
/v1/namespaces/{ns}/steps/delete`` and ``POST /v1/namespaces/{ns}/steps/update`` (steps
by position or id), ``GET /v1/namespaces`` (``?details=true``
adds counts), ``GET /v1/namespaces/{ns}/steps``, ``GET /v1/namespaces/{ns}/page`` (the
viewer's data), ``GET /v1/export``, ``POST /v1/import``, ``DELETE /v1/namespaces/{ns}``,
``GET /healthz`` (no token), ``GET /openapi.json`` and ``GET /docs`` (no token; the
schema holds no data; Swagger UI's files are served from the ``swagger-ui-bundle-v2``
package, so the page needs no network), and the viewer page ``GET /ui`` with its
script and style (no token: the page holds no data; it asks the API with the token
typed into it). Every other route needs ``Authorization: Bearer <token>`` when tokens
are configured; a token limited to namespaces gets 403 elsewhere. Bodies over the size
limit get 413 before they are read whole, and a body that does not arrive within
the body timeout 408. A ``Host`` header that names another server gets 421 and a foreign
``Origin`` 403 (:mod:`osumem.serve.hosts`). A namespace in a path must be exactly what
the route received (:func:`namespace_in_path`). Every error is the JSON body of
:mod:`osumem.serve.http_errors`, listed in the OpenAPI schema.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from osumem import __version__
from osumem.errors import InvalidInputError
from osumem.serve.auth import Grant, TokenTable
from osumem.serve.client import MAX_STEPS_PAGE
from osumem.serve.connection_limits import BODY_TIMEOUT
from osumem.serve.hosts import HostPolicy
from osumem.serve.http_errors import document_errors, install_error_handlers
from osumem.serve.schemas import (
    AddRequest,
    AddResponse,
    AddTextRequest,
    DeleteResponse,
    DeleteStepsRequest,
    DeleteStepsResponse,
    ImportResponse,
    NamespaceDetailsResponse,
    NamespaceInfo,
    NamespacesResponse,
    RetrieveRequest,
    RetrieveResponse,
    StepsResponse,
    StoredStepOut,
    UpdateStepRequest,
    check_namespace_name,
    error_status,
)
from osumem.serve.service import MemoryService

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Swagger UI's files, served under /docs/assets/ (no token, no network).
DOCS_ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")
#: The viewer page's files.
UI_PATHS = ("/ui", "/ui/app.js", "/ui/app.css")
#: Paths served without a token.
PUBLIC_PATHS = frozenset(
    {
        "/healthz",
        "/openapi.json",
        "/docs",
        "/docs/oauth2-redirect",
        *(f"/docs/assets/{name}" for name in DOCS_ASSETS),
        *UI_PATHS,
    }
)


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
    """ASGI middleware in front of everything: the ``Host`` and ``Origin`` checks (421,
    403), the body size limit (413, checked on ``Content-Length`` and again while the
    body streams in) and its time limit (408), and the bearer token (401), whose grant
    it leaves in ``scope["osumem.grant"]``."""

    def __init__(
        self,
        app: ASGIApp,
        tokens: TokenTable,
        max_body_bytes: int,
        hosts: HostPolicy | None = None,
        body_timeout: float = BODY_TIMEOUT,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.max_body_bytes = max_body_bytes
        self.hosts = hosts or HostPolicy(None)
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not self.hosts.allows_host(headers.get("host")):
            host = headers.get("host", "")[:100]
            await _send_json(
                send,
                421,
                _error("MisdirectedRequest", f"this server does not answer for Host {host!r}"),
            )
            return
        if not self.hosts.allows_origin(headers.get("origin")):
            origin = headers.get("origin", "")[:100]
            await _send_json(
                send, 403, _error("Forbidden", f"requests from Origin {origin!r} are not accepted")
            )
            return
        limit = self.max_body_bytes
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _send_json(send, 413, _too_large(limit))
            return
        public = scope["path"] in PUBLIC_PATHS
        if self.tokens.enabled and not public:
            grant = self.tokens.grant_for_header(headers.get("authorization"))
            if grant is None:
                refusal = _error(
                    "Unauthorized", "a valid 'Authorization: Bearer <token>' header is required"
                )
                await _send_json(send, 401, refusal, [(b"www-authenticate", b"Bearer")])
                return
            scope["osumem.grant"] = grant
        if public:  # their routes read no body: never wait for one
            await self.app(scope, receive, send)
            return
        # Read the body here (it is bounded in size and time), so an oversized or slow
        # one is refused before any route sees it, whether or not it came with a
        # Content-Length.
        chunks, received, more = [], 0, True
        try:
            async with asyncio.timeout(self.body_timeout):
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
        except TimeoutError:
            late = f"the request body did not arrive within {self.body_timeout:g} s"
            await _send_json(send, 408, _error("RequestTimeout", late), [(b"connection", b"close")])
            return
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later: only the disconnect message

        await self.app(scope, replay, send)


def _error(error_type: str, message: str) -> dict[str, Any]:
    return {"error": {"type": error_type, "message": message}}


def _too_large(limit: int) -> dict[str, Any]:
    return _error("RequestTooLarge", f"request body over the server's limit of {limit} bytes")


def namespace_routes(app: Any) -> frozenset[str]:
    """The last path segments of the routes below ``.../{namespace}/`` (``messages``,
    ``retrieve``, ...): a namespace ending in ``/<one of them>`` would read as that
    route of a shorter namespace."""
    suffixes = set()
    for route in app.routes:
        _head, sep, tail = getattr(route, "path_format", "").partition("{namespace}/")
        if sep and tail:
            suffixes.add(tail)
    return frozenset(suffixes)


async def namespace_in_path(request: Request) -> None:
    """Every route with a ``{namespace}`` in its path (the routes added later included):
    the namespace is exactly the path part the route received (no character of the
    path dropped or reinterpreted), a valid name (:func:`check_namespace_name`), not
    one that reads as another route (``a/messages``), and one the token may use."""
    namespace = request.path_params.get("namespace")
    route = request.scope.get("route")
    if not isinstance(namespace, str) or route is None:
        return
    path = request.scope["path"]
    if route.path_format.replace("{namespace}", namespace) != path:
        raise InvalidInputError(
            f"namespace in path {path!r}: the name must be the path's text exactly "
            "(control characters are not allowed)"
        )
    check_namespace_name(namespace)
    for suffix in namespace_routes(request.app):
        if namespace.endswith("/" + suffix):
            raise InvalidInputError(
                f"namespace {namespace!r}: ends in '/{suffix}', which names a route of "
                f"namespace {namespace[: -len(suffix) - 1]!r}; choose another name"
            )
    grant: Grant | None = request.scope.get("osumem.grant")
    if grant is not None and not grant.allows(namespace):
        raise ForbiddenNamespace(f"this token may not use namespace {namespace!r}")


def build_app(
    service: MemoryService,
    tokens: TokenTable | None = None,
    *,
    host: str = "127.0.0.1",
    allowed_hosts: tuple[str, ...] = (),
    body_timeout: float = BODY_TIMEOUT,
) -> Any:
    """The ASGI application (FastAPI + the mounted MCP endpoint) for ``service``,
    answering for the loopback names, ``host`` and ``allowed_hosts``
    (:class:`~osumem.serve.hosts.HostPolicy`)."""
    table = tokens or TokenTable()
    mcp_server = _mcp_routes(service, table)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with mcp_server.session_manager.run():
            yield

    app = FastAPI(
        title="OSU-Mem memory server",
        version=__version__,
        description="Trajectory memory for LLM agents: store chat messages per namespace, "
        "retrieve the steps that support a query under a token budget. MCP (streamable "
        'HTTP) is served at /mcp. Every error is JSON {"error": {"type", "message"}}.',
        lifespan=lifespan,
        redoc_url=None,
        docs_url=None,
        redirect_slashes=False,  # an API answers the path it was given, or 404
        dependencies=[Depends(namespace_in_path)],
    )
    app.router.routes.extend(mcp_server.routes)
    _add_pages(app)
    install_error_handlers(app, error_status)
    document_errors(app, PUBLIC_PATHS)

    @app.exception_handler(ForbiddenNamespace)
    async def forbidden(request: Request, exc: ForbiddenNamespace) -> JSONResponse:
        return JSONResponse(_error("Forbidden", str(exc)), status_code=403)

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
            log_id=body.log_id,
            metadata=body.metadata,
        )
        return AddResponse.of(result)

    @app.post("/v1/namespaces/{namespace:path}/text", response_model=AddResponse, tags=["memory"])
    async def add_text(namespace: str, body: AddTextRequest, request: Request) -> AddResponse:
        """Store one user (or assistant) turn of plain text, as the message
        ``{"role", "content"}`` would be stored; answers once committed."""
        allowed(request, namespace)
        result = await service.aadd(
            body.text,
            namespace=namespace,
            role=body.role,
            metadata=body.metadata,
            source=body.source,
            on_duplicate=body.on_duplicate,
            log_id=body.log_id,
        )
        return AddResponse.of(result)

    @app.post(
        "/v1/namespaces/{namespace:path}/steps/delete",
        response_model=DeleteStepsResponse,
        tags=["memory"],
    )
    async def delete_steps(
        namespace: str, body: DeleteStepsRequest, request: Request
    ) -> DeleteStepsResponse:
        """Delete steps by position or id (one transaction): the later steps move down,
        ids never change, and nothing of the deleted steps stays in the store. 404 for a
        position or id the namespace does not hold (nothing is deleted then)."""
        allowed(request, namespace)
        ids = await service.adelete(namespace, body.positions, ids=body.ids)
        n = await service.acall("n_steps", namespace)
        return DeleteStepsResponse(namespace=namespace, deleted_ids=ids, steps_in_namespace=n)

    @app.post(
        "/v1/namespaces/{namespace:path}/steps/update",
        response_model=StoredStepOut,
        tags=["memory"],
    )
    async def update_step(
        namespace: str, body: UpdateStepRequest, request: Request
    ) -> StoredStepOut:
        """Change one step's text (encoded and counted again) and/or metadata; answers
        with the step as stored now. 404 for a position or id the namespace does not
        hold."""
        allowed(request, namespace)
        step = await service.aupdate(
            namespace, body.position, id=body.id, text=body.text, metadata=body.metadata
        )
        return StoredStepOut(**step.to_dict())

    @app.post(
        "/v1/namespaces/{namespace:path}/retrieve", response_model=RetrieveResponse, tags=["memory"]
    )
    async def retrieve(namespace: str, body: RetrieveRequest, request: Request) -> JSONResponse:
        """The past steps of a namespace that best support the query, under the budget:
        a rendered context block and the structured steps; with ``explain``, why each
        step is there and what the budget left out."""
        allowed(request, namespace)
        result = await service.aretrieve(
            body.query,
            body.budget,
            namespace=namespace,
            method=body.method,
            explain=body.explain,
            filter=body.filter,
        )
        # the response model documents the shape; the dict is built straight from the
        # result (no second validation pass on the hot path)
        return JSONResponse(result.to_dict(explain=body.explain) | {"rendered": result.render()})

    @app.get(
        "/v1/namespaces",
        response_model=NamespaceDetailsResponse | NamespacesResponse,
        tags=["memory"],
    )
    async def list_namespaces(
        request: Request, details: bool = False
    ) -> NamespaceDetailsResponse | NamespacesResponse:
        """The namespaces holding steps (those this token may use); with
        ``details=true``, each with its step count and held messages."""
        grant = grant_of(request)
        if details:
            info = await service.acall("namespace_info")
            info = [i for i in info if grant is None or grant.allows(i["namespace"])]
            return NamespaceDetailsResponse(
                namespaces=[i["namespace"] for i in info],
                details=[NamespaceInfo(**i) for i in info],
            )
        names = await service.anamespaces()
        if grant is not None:
            names = [n for n in names if grant.allows(n)]
        return NamespacesResponse(namespaces=names)

    @app.get("/v1/namespaces/{namespace:path}/steps", response_model=StepsResponse, tags=["memory"])
    async def list_steps(
        namespace: str,
        request: Request,
        start: Annotated[int | None, Query(ge=0, description="First position.")] = None,
        stop: Annotated[int | None, Query(ge=0, description="Positions below this.")] = None,
        grep: Annotated[
            str | None,
            Query(max_length=1000, description="Regular expression over text, tool, entities."),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_STEPS_PAGE)] = 1000,
    ) -> JSONResponse:
        """The stored steps of a namespace (position, role, tool, token cost, units,
        text), a range of positions and a pattern at a time; ``next`` says where to
        continue. 404 for a namespace that holds nothing."""
        allowed(request, namespace)
        page = await service.acall(
            "steps", namespace, start=start, stop=stop, grep=grep, limit=limit
        )
        return JSONResponse(page)

    @app.get("/v1/namespaces/{namespace:path}/page", tags=["memory"])
    async def page_data(namespace: str, request: Request) -> JSONResponse:
        """The viewer page's data of a namespace: its steps as columns (texts cut at 300
        characters), its units and their members."""
        allowed(request, namespace)
        return JSONResponse(await service.acall("page_data", namespace))

    @app.get("/v1/export", tags=["memory"], response_class=PlainTextResponse)
    async def export_memory(
        request: Request,
        namespace: Annotated[
            list[str] | None, Query(description="Namespaces to export (default: all).")
        ] = None,
        embeddings: bool = True,
    ) -> PlainTextResponse:
        """The memory as JSON Lines (osumem-export, version 1): a header, each
        namespace's record and steps, an end record. ``osumem import`` or ``POST
        /v1/import`` reads it back exactly."""
        grant = grant_of(request)
        if namespace:
            for ns in namespace:
                allowed(request, ns)
            names: list[str] | None = list(namespace)
        else:
            names = await service.anamespaces()
            if grant is not None:
                names = [n for n in names if grant.allows(n)]
        lines = await service.acall("export_lines", names, embeddings=embeddings)
        return PlainTextResponse("\n".join(lines) + "\n", media_type="application/x-ndjson")

    @app.post("/v1/import", response_model=ImportResponse, tags=["memory"])
    async def import_memory(request: Request, replace: bool = False) -> ImportResponse:
        """Import an export (the request body, JSON Lines) in one transaction: a
        namespace already held with the same content is left unchanged, one holding
        other content is refused (409) unless ``replace=true``; a malformed file is 422
        naming the line, and nothing is written."""
        try:
            text = (await request.body()).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"request body: not UTF-8 text (byte {exc.start})") from None
        lines = text.splitlines()
        for ns in _header_namespaces(lines):
            allowed(request, ns)
        summary = await service.acall("import_lines", lines, replace=replace)
        return ImportResponse(**summary.to_dict())

    @app.delete("/v1/namespaces/{namespace:path}", response_model=DeleteResponse, tags=["memory"])
    async def delete_namespace(namespace: str, request: Request) -> DeleteResponse:
        """Delete every step of a namespace (one transaction)."""
        allowed(request, namespace)
        n = await service.adelete_namespace(namespace)
        return DeleteResponse(namespace=namespace, deleted_steps=n)

    hosts = HostPolicy.for_bind(host, allowed_hosts)
    return LimitsAndAuth(app, table, service.limits.max_body_bytes, hosts, body_timeout)


def _header_namespaces(lines: list[str]) -> list[str]:
    """The namespaces an export's header line lists (none when it cannot be read:
    the import then fails at line 1 without writing anything)."""
    import json

    try:
        header = json.loads(lines[0]) if lines else None
    except ValueError:
        return []
    names = header.get("namespaces") if isinstance(header, dict) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def _add_pages(app: FastAPI) -> None:
    """``/docs`` with Swagger UI's files served from the ``swagger-ui-bundle-v2``
    package (no network), and the viewer page ``/ui``."""
    from fastapi.openapi.docs import get_swagger_ui_html

    from osumem.serve import ui

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="OSU-Mem memory server: API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon-32x32.png",
        )

    @app.get("/docs/assets/{name}", include_in_schema=False)
    async def docs_asset(name: str) -> Response:
        if name not in DOCS_ASSETS:
            return JSONResponse(
                {"error": {"type": "NotFound", "message": "no such file"}}, status_code=404
            )
        from swagger_ui_bundle import swagger_ui_path

        kind = {"js": "text/javascript", "css": "text/css", "png": "image/png"}
        data = (Path(swagger_ui_path) / name).read_bytes()
        return Response(data, media_type=kind[name.rsplit(".", 1)[1]], headers=_CACHE)

    headers = {
        "content-security-policy": ui.SERVER_CSP,
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "cache-control": "no-store",
    }

    @app.get("/ui", include_in_schema=False)
    async def ui_page() -> HTMLResponse:
        return HTMLResponse(ui.server_page(), headers=headers)

    @app.get("/ui/app.js", include_in_schema=False)
    async def ui_script() -> Response:
        return Response(ui.asset("app.js"), media_type="text/javascript", headers=headers)

    @app.get("/ui/app.css", include_in_schema=False)
    async def ui_style() -> Response:
        return Response(ui.asset("app.css"), media_type="text/css", headers=headers)


_CACHE = {"cache-control": "public, max-age=86400", "x-content-type-options": "nosniff"}


def _mcp_routes(service: MemoryService, tokens: TokenTable) -> Any:
    """The MCP server with its streamable HTTP app built (stateless, JSON answers). Its
    own Host check is off: :class:`LimitsAndAuth` checks every route, /mcp included."""
    from mcp.server.transport_security import TransportSecuritySettings

    from osumem.serve.mcp_app import build_mcp

    server = build_mcp(service, tokens)
    starlette_app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        max_request_body_size=service.limits.max_body_bytes,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )

    class Routes:
        routes = starlette_app.routes
        session_manager = server.session_manager

    return Routes
