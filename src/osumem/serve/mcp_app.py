"""The MCP face: five tools over a :class:`~osumem.serve.service.MemoryService`, built
with the official ``mcp`` SDK. Every library error comes back as an MCP tool error
(``isError``) carrying the typed message; the server keeps running."""

import inspect
from collections.abc import Awaitable
from typing import Annotated, Any, TypeVar

from pydantic import Field

from osumem.errors import OSUMemError
from osumem.serve.auth import TokenTable
from osumem.serve.schemas import (
    AddResponse,
    ChatMessage,
    DeleteResponse,
    NamespacesResponse,
    RetrieveResponse,
    StepsResponse,
    check_namespace_name,
)
from osumem.serve.service import MemoryService

T = TypeVar("T")

INSTRUCTIONS = """\
Trajectory memory for a tool-using agent (OSU-Mem). After each turn, store the new
messages with `memory_add_messages` (OpenAI chat format, into one namespace per task
or episode). Before each model call, fetch context with `memory_retrieve` (a query
in words and a token budget) and put its `rendered` block into the prompt."""


def build_mcp(service: MemoryService, tokens: TokenTable | None = None) -> Any:
    """An ``MCPServer`` exposing ``service``. With ``tokens`` enabled (the HTTP face),
    each call's bearer token must allow the namespace it touches."""
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    table = tokens or TokenTable()
    server = MCPServer("osumem", instructions=INSTRUCTIONS, log_level="WARNING")

    def authorize(ctx: Any, namespace: str | None) -> Any:
        """The caller's grant (None when authentication is off)."""
        if not table.enabled:
            return None
        headers = ctx.headers or {}
        grant = table.grant_for_header(headers.get("authorization"))
        if grant is None:
            raise ToolError("unauthorized: a valid bearer token is required")
        if namespace is not None and not grant.allows(namespace):
            raise ToolError(f"forbidden: this token may not use namespace {namespace!r}")
        return grant

    async def guarded(call: Awaitable[T]) -> T:
        try:
            return await call
        except OSUMemError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    def checked(namespace: str) -> None:
        try:
            check_namespace_name(namespace)
        except OSUMemError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    def tool(**options: Any) -> Any:
        def register(fn: Any) -> Any:
            server.add_tool(fn, description=inspect.cleandoc(fn.__doc__ or ""), **options)
            return fn

        return register

    Namespace = Annotated[
        str,
        Field(
            description="Memory namespace: one per task or episode; nothing crosses namespaces.",
            min_length=1,
            max_length=200,
        ),
    ]

    @tool(
        name="memory_add_messages",
        title="Store chat messages",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    async def add_messages(
        namespace: Namespace,
        messages: Annotated[
            list[ChatMessage],
            Field(description="New OpenAI-format messages of the agent, oldest first."),
        ],
        ctx: Context,
    ) -> AddResponse:
        """Store new chat messages of the agent (OpenAI format) in a namespace. Each user
        message, assistant text and tool call (with its result) becomes one step; a tool
        call whose result has not arrived yet is held until it does. Returns once the
        steps are durably stored. Invalid messages are rejected whole, naming which
        message and field is wrong."""
        authorize(ctx, namespace)
        checked(namespace)
        raw = [m.model_dump(exclude_unset=True) for m in messages]
        result = await guarded(service.aadd_messages(namespace, raw))
        return AddResponse.of(result)

    @tool(
        name="memory_retrieve",
        title="Retrieve context",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def retrieve(
        query: Annotated[
            str, Field(description="What the agent needs to know, in words.", min_length=1)
        ],
        ctx: Context,
        namespace: Namespace = "default",
        budget: Annotated[
            int,
            Field(
                description="Token budget of the returned steps (> 0).",
                # documented for clients; the service checks it (once per call)
                json_schema_extra={"exclusiveMinimum": 0},
            ),
        ] = 256,
        method: Annotated[
            str | None,
            Field(description="Retrieval method (default: the server's, usually 'osumem')."),
        ] = None,
        explain: Annotated[
            bool,
            Field(
                description="Also return `explanation`: why each step is there (cosine, "
                "lexical score, the unit that brought it in) and what the budget left out."
            ),
        ] = False,
    ) -> RetrieveResponse:
        """Retrieve the past steps of a namespace that best support a query, packed into
        a token budget. Returns `rendered` (a context block for the prompt, in time
        order) and `steps` (each with position, role, tool, token cost, OSUs, text)."""
        authorize(ctx, namespace)
        checked(namespace)
        result = await guarded(
            service.aretrieve(query, budget, namespace=namespace, method=method, explain=explain)
        )
        return RetrieveResponse.of(result, explain=explain)

    @tool(
        name="memory_show_steps",
        title="Read stored steps",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def show_steps(
        namespace: Namespace,
        ctx: Context,
        start: Annotated[int | None, Field(description="First position.", ge=0)] = None,
        stop: Annotated[int | None, Field(description="Positions below this.", ge=0)] = None,
        grep: Annotated[
            str | None,
            Field(description="Regular expression over text, tool and entities.", max_length=1000),
        ] = None,
        limit: Annotated[int, Field(description="Most steps returned.", ge=1, le=200)] = 50,
    ) -> StepsResponse:
        """Read the stored steps of a namespace in time order (position, role, tool,
        token cost, units, text), a range of positions or a pattern at a time, e.g. to
        look up what happened at a step a retrieval pointed to. `next` says where to
        continue."""
        authorize(ctx, namespace)
        checked(namespace)
        page = await guarded(
            service.acall("steps", namespace, start=start, stop=stop, grep=grep, limit=limit)
        )
        return StepsResponse(**page)

    @tool(
        name="memory_list_namespaces",
        title="List namespaces",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def list_namespaces(ctx: Context) -> NamespacesResponse:
        """List the namespaces that hold steps (those the caller may use)."""
        grant = authorize(ctx, None)
        names = await guarded(service.anamespaces())
        if grant is not None:
            names = [n for n in names if grant.allows(n)]
        return NamespacesResponse(namespaces=names)

    @tool(
        name="memory_delete_namespace",
        title="Delete a namespace",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    async def delete_namespace(namespace: Namespace, ctx: Context) -> DeleteResponse:
        """Delete every step of a namespace, permanently. Returns how many steps were
        deleted (0 when the namespace held none)."""
        authorize(ctx, namespace)
        checked(namespace)
        n = await guarded(service.adelete_namespace(namespace))
        return DeleteResponse(namespace=namespace, deleted_steps=n)

    return server
