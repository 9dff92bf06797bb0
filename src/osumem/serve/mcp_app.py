"""The MCP face: eight tools over a :class:`~osumem.serve.service.MemoryService`, built
with the official ``mcp`` SDK. Every error of every tool (the tools added later
included) comes back as an MCP tool error (``isError``) of one line,
``Type: where: what``: the library's typed message, or ``InvalidInputError`` naming
the argument that fails the tool's schema (:func:`tool_error_text`); the server keeps
running. Over stdio, a line that is not a JSON-RPC message gets a JSON-RPC error
reply (:func:`serve_stdio`)."""

import inspect
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, WithJsonSchema

from osumem import __version__
from osumem.errors import OSUMemError
from osumem.serve.auth import TokenTable
from osumem.serve.schemas import (
    AddResponse,
    ChatMessage,
    DeleteResponse,
    DeleteStepsResponse,
    NamespacesResponse,
    RetrieveResponse,
    StepsResponse,
    StoredStepOut,
    check_namespace_name,
)
from osumem.serve.service import MemoryService

INSTRUCTIONS = """\
Trajectory memory for a tool-using agent (OSU-Mem). After each turn, store the new
messages with `memory_add_messages` (OpenAI chat format, into one namespace per task
or episode). Before each model call, fetch context with `memory_retrieve` (a query
in words and a token budget) and put its `rendered` block into the prompt."""


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every ``#/$defs/...`` reference replaced by its definition (the
    schema of one argument must stand alone inside a tool's input schema)."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(dict(defs[ref.rsplit("/", 1)[1]]))
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)  # type: ignore[no-any-return]


#: Chat messages as the tools take them: any JSON objects (the library validates them
#: and names the message and field), documented with the OpenAI message schema.
Messages = Annotated[
    list[dict[str, Any]],
    WithJsonSchema(
        {
            "type": "array",
            "items": _inline(ChatMessage.model_json_schema()),
            "description": "New OpenAI-format messages of the agent, oldest first.",
        }
    ),
]


def _field(loc: Any) -> str:
    """``messages[1].role`` for pydantic's ``("messages", 1, "role")``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "arguments"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def tool_error_text(exc: BaseException) -> str | None:
    """The one-line message of a failed tool call, from the innermost cause of the
    SDK's wrapper: a library error as ``Type: message``, arguments that fail the
    schema as ``InvalidInputError: field: what (got value)``, a deliberate tool error
    as its message. ``None`` for anything else (an internal error)."""
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError

    inner: BaseException = exc
    while inner.__cause__ is not None:
        inner = inner.__cause__
    if isinstance(inner, OSUMemError):
        return f"{type(inner).__name__}: {' '.join(str(inner).split())}"
    if isinstance(inner, ValidationError):
        problems = [
            f"{_field(e['loc'])}: {e['msg']} (got {_short(e.get('input'))})"
            for e in inner.errors(include_url=False)
        ]
        return "InvalidInputError: " + "; ".join(problems)
    if isinstance(inner, ToolError) and not isinstance(inner, UnexpectedToolError):
        return " ".join(str(inner).split())
    return None


def build_mcp(service: MemoryService, tokens: TokenTable | None = None) -> Any:
    """An ``MCPServer`` exposing ``service``. With ``tokens`` enabled (the HTTP face),
    each call's bearer token must allow the namespace it touches."""
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    class OSUMemMCPServer(MCPServer):  # type: ignore[misc]
        """Every tool's errors as :func:`tool_error_text` writes them."""

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            try:
                return await super().call_tool(name, arguments, context)
            except Exception as exc:
                text = tool_error_text(exc)
                if text is None:
                    raise
                raise ToolError(text) from exc

    table = tokens or TokenTable()
    server = OSUMemMCPServer(
        "osumem", instructions=INSTRUCTIONS, log_level="WARNING", version=__version__
    )

    def authorize(ctx: Any, namespace: str | None) -> Any:
        """The caller's grant (None when authentication is off)."""
        if namespace is not None:
            check_namespace_name(namespace)
        if not table.enabled:
            return None
        headers = ctx.headers or {}
        grant = table.grant_for_header(headers.get("authorization"))
        if grant is None:
            raise ToolError("unauthorized: a valid bearer token is required")
        if namespace is not None and not grant.allows(namespace):
            raise ToolError(f"forbidden: this token may not use namespace {namespace!r}")
        return grant

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
    Metadata = Annotated[
        dict[str, Any] | None,
        Field(
            description="JSON data stored with the new steps (returned with each retrieved "
            "step; what memory_retrieve's `filter` matches)."
        ),
    ]

    @tool(
        name="memory_add_messages",
        title="Store chat messages",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    async def add_messages(
        namespace: Namespace,
        messages: Messages,
        ctx: Context,
        log_id: Annotated[
            str | None,
            Field(
                description="Identity of these messages (e.g. their index in the run): "
                "messages added before under the same id, or with the same content when "
                "no id is given, are not stored twice.",
                min_length=1,
            ),
        ] = None,
        metadata: Metadata = None,
    ) -> AddResponse:
        """Store new chat messages of the agent (OpenAI format) in a namespace. Each user
        message, assistant text and tool call (with its result) becomes one step; a tool
        call whose result has not arrived yet is held until it does. Returns once the
        steps are durably stored. Messages added before (the same log_id, or the
        same content) are skipped. Invalid messages are rejected whole, naming which
        message and field is wrong."""
        authorize(ctx, namespace)
        result = await service.aadd_messages(namespace, messages, log_id=log_id, metadata=metadata)
        return AddResponse.of(result)

    @tool(
        name="memory_add_text",
        title="Store a text",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    async def add_text(
        namespace: Namespace,
        text: Annotated[str, Field(description="The text (a fact, a turn).", min_length=1)],
        ctx: Context,
        role: Annotated[
            Literal["user", "assistant"], Field(description="Whose turn it is.")
        ] = "user",
        metadata: Metadata = None,
    ) -> AddResponse:
        """Store one plain-text turn (a user's by default) in a namespace, as a chat
        message with that role and content would be stored. Returns once stored."""
        authorize(ctx, namespace)
        result = await service.aadd(text, namespace=namespace, role=role, metadata=metadata)
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
        filter: Annotated[
            dict[str, Any] | None,
            Field(
                description="Only steps that pass, before ranking and packing: a value to "
                "equal or operators ($eq $ne $gt $gte $lt $lte $in $nin $exists) per key, e.g. "
                '{"user": "ana", "time": {"$gte": "2026-05-01T00:00:00Z"}}; keys role, tool, '
                "source, time, updated or a metadata key; $and, $or, $not."
            ),
        ] = None,
    ) -> RetrieveResponse:
        """Retrieve the past steps of a namespace that best support a query, packed into
        a token budget. Returns `rendered` (a context block for the prompt, in time
        order) and `steps` (each with position, role, tool, token cost, OSUs, metadata,
        text)."""
        authorize(ctx, namespace)
        result = await service.aretrieve(
            query, budget, namespace=namespace, method=method, explain=explain, filter=filter
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
        page = await service.acall(
            "steps", namespace, start=start, stop=stop, grep=grep, limit=limit
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
        names = await service.anamespaces()
        if grant is not None:
            names = [n for n in names if grant.allows(n)]
        return NamespacesResponse(namespaces=names)

    Positions = Annotated[
        list[int] | None, Field(description="Step positions (as steps report them).")
    ]
    Ids = Annotated[list[int] | None, Field(description="Or: step ids.")]

    @tool(
        name="memory_delete_steps",
        title="Delete steps",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    async def delete_steps(
        namespace: Namespace, ctx: Context, positions: Positions = None, ids: Ids = None
    ) -> DeleteStepsResponse:
        """Delete steps of a namespace by position or id, permanently (nothing of them
        stays in the store); the later steps move down one position each."""
        authorize(ctx, namespace)
        deleted = await service.adelete(namespace, positions, ids=ids)
        n = await service.acall("n_steps", namespace)
        return DeleteStepsResponse(namespace=namespace, deleted_ids=deleted, steps_in_namespace=n)

    @tool(
        name="memory_update_step",
        title="Correct a step",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    async def update_step(
        namespace: Namespace,
        ctx: Context,
        position: Annotated[int | None, Field(description="The step's position.")] = None,
        id: Annotated[int | None, Field(description="Or: its id.")] = None,
        text: Annotated[
            str | None, Field(description="Its new text (the old one is gone).", min_length=1)
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Its new metadata (replaces the old).")
        ] = None,
    ) -> StoredStepOut:
        """Correct one step of a namespace: its text and/or its metadata. Returns the
        step as stored now."""
        authorize(ctx, namespace)
        step = await service.aupdate(namespace, position, id=id, text=text, metadata=metadata)
        return StoredStepOut(**step.to_dict())

    @tool(
        name="memory_delete_namespace",
        title="Delete a namespace",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    async def delete_namespace(namespace: Namespace, ctx: Context) -> DeleteResponse:
        """Delete every step of a namespace, permanently. Returns how many steps were
        deleted (0 when the namespace held none)."""
        authorize(ctx, namespace)
        n = await service.adelete_namespace(namespace)
        return DeleteResponse(namespace=namespace, deleted_steps=n)

    return server


async def serve_stdio(server: Any) -> None:
    """Serve ``server`` (from :func:`build_mcp`) over stdin/stdout until stdin closes.
    As the SDK's own stdio runner, plus: a line that is not JSON gets a JSON-RPC
    parse error (-32700), and JSON that is not a JSON-RPC message an invalid-request
    error (-32600), both with ``id: null``, instead of no answer at all."""
    import anyio
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
    from mcp.types import ErrorData, JSONRPCError

    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs, too
    async with stdio_server() as (read, write):
        send, receive = anyio.create_memory_object_stream[Any](0)

        async def pump() -> None:
            async with send:
                async for item in read:
                    if not isinstance(item, Exception):
                        await send.send(item)
                        continue
                    parse = isinstance(item, ValidationError) and any(
                        e["type"] == "json_invalid" for e in item.errors()
                    )
                    error = ErrorData(
                        code=-32700 if parse else -32600,
                        message="Parse error: not JSON"
                        if parse
                        else "Invalid Request: not a JSON-RPC 2.0 message",
                    )
                    reply = JSONRPCError(jsonrpc="2.0", id=None, error=error)
                    await write.send(SessionMessage(reply))

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            await lowlevel.run(receive, write, lowlevel.create_initialization_options())
