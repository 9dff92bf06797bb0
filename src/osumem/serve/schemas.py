"""Request and response shapes shared by the HTTP and MCP faces, and how library
errors map onto HTTP statuses."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from osumem.errors import (
    IncompatibleStoreError,
    InvalidInputError,
    OSUMemError,
    StepNotFoundError,
    UnknownMethodError,
    UnknownNamespaceError,
)
from osumem.memory import Retrieved
from osumem.serve.service import AddResult

#: Longest accepted namespace name (characters).
MAX_NAMESPACE_CHARS = 200


class ToolCallFunction(BaseModel):
    """The function of an OpenAI tool call."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(description="The tool (function) name.")
    arguments: str | dict[str, Any] = Field(
        default="{}", description="The call's arguments: a JSON object or its text."
    )


class ToolCall(BaseModel):
    """One tool call of an assistant message (OpenAI format)."""

    model_config = ConfigDict(extra="allow")
    id: str = Field(description="Call id; the tool message answering it repeats it.")
    type: str = Field(default="function", description="Always 'function'.")
    function: ToolCallFunction


class ChatMessage(BaseModel):
    """One OpenAI-format chat message. System and developer messages are accepted and
    not stored as steps; a tool message answers the assistant's call with the same id."""

    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = Field(
        default=None, description="Text, or a list of content parts with 'text'."
    )
    tool_calls: list[ToolCall] | None = Field(
        default=None, description="Tool calls of an assistant message."
    )
    tool_call_id: str | None = Field(
        default=None, description="For a tool message: the id of the call it answers."
    )
    name: str | None = None


class AddRequest(BaseModel):
    """Body of ``POST /v1/namespaces/{ns}/messages``."""

    messages: list[dict[str, Any]] = Field(
        description="OpenAI-format chat messages, oldest first (role, content, "
        "tool_calls, tool_call_id)."
    )
    source: str | None = Field(
        default=None,
        min_length=1,
        description="Source name of the new steps (default: the namespace).",
    )
    prefix_namespace: bool | None = Field(
        default=None,
        strict=True,
        description="Prefix entities and tool signatures with the source name.",
    )
    hold_open_calls: bool = Field(
        default=True,
        strict=True,
        description="Hold a trailing tool call without its result until the result "
        "arrives in a later add.",
    )
    on_duplicate: Literal["skip", "append", "error"] = Field(
        default="skip",
        description="These messages were added to the namespace before (same content, or "
        "the same log_id): skip them (default: a retried or re-run add stores nothing "
        "twice), append them again, or fail (422).",
    )
    log_id: str | None = Field(
        default=None,
        min_length=1,
        description="The identity of these messages for on_duplicate (instead of their "
        "content), e.g. the message's index or id in the agent's run.",
    )
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="JSON data stored with every step this add makes; returned with each "
        "retrieved step and what a retrieve's `filter` matches.",
    )


class AddTextRequest(BaseModel):
    """Body of ``POST /v1/namespaces/{ns}/text``: one user or assistant turn."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, pattern=r"\S", description="The turn's text.")
    role: Literal["user", "assistant"] = Field(default="user")
    metadata: dict[str, Any] | None = Field(default=None, description="As for messages.")
    source: str | None = Field(default=None, min_length=1)
    on_duplicate: Literal["skip", "append", "error"] = Field(default="skip")
    log_id: str | None = Field(default=None, min_length=1)


class DeleteStepsRequest(BaseModel):
    """Body of ``POST /v1/namespaces/{ns}/steps/delete``: the steps by position or id."""

    model_config = ConfigDict(extra="forbid")
    positions: list[int] | None = Field(
        default=None, description="Positions to delete (the later steps move down)."
    )
    ids: list[int] | None = Field(default=None, description="Or: the steps' ids.")


class DeleteStepsResponse(BaseModel):
    """Deleted steps: their ids and what the namespace holds now."""

    namespace: str
    deleted_ids: list[int]
    steps_in_namespace: int


class UpdateStepRequest(BaseModel):
    """Body of ``POST /v1/namespaces/{ns}/steps/update``: one step by position or id,
    its new text and/or metadata."""

    model_config = ConfigDict(extra="forbid")
    position: int | None = Field(default=None, description="The step's position.")
    id: int | None = Field(default=None, description="Or: its id.")
    text: str | None = Field(
        default=None, description="The new step text (encoded and counted again)."
    )
    metadata: dict[str, Any] | None = Field(
        default=None, description="The new metadata (replaces the old whole)."
    )


class StoredStepOut(BaseModel):
    """One stored step with its metadata and times."""

    position: int
    step_id: int
    namespace: str
    source: str
    role: str
    tool_action: str
    cost: int
    metadata: dict[str, Any]
    time: float | None = Field(description="When it was added (seconds since the epoch).")
    updated: float | None = Field(description="When it was last updated (null: never).")
    text: str


class AddResponse(BaseModel):
    """An acknowledged add: its transaction has committed."""

    namespace: str
    step_ids: list[int] = Field(description="Store ids of the new steps.")
    steps_in_namespace: int
    held_messages: int = Field(
        description="Messages held until their tool results arrive (stored, not steps yet)."
    )

    @classmethod
    def of(cls, result: AddResult) -> AddResponse:
        """From the service's result."""
        return cls(
            namespace=result.namespace,
            step_ids=result.step_ids,
            steps_in_namespace=result.steps_in_namespace,
            held_messages=result.held_messages,
        )


class RetrieveRequest(BaseModel):
    """Body of ``POST /v1/namespaces/{ns}/retrieve``."""

    model_config = ConfigDict(extra="forbid")
    query: str = Field(
        strict=True,
        min_length=1,
        pattern=r"\S",
        description="What the agent needs to know, in words (not only white space).",
    )
    budget: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        description="Token budget of the returned steps (> 0; default: the server's).",
    )
    method: str | None = Field(
        default=None, description="Retrieval method (default: the server's)."
    )
    explain: bool = Field(
        default=False,
        strict=True,
        description="Also return `explanation`: per step its score parts (cosine, flat "
        "rank, lexical score, the unit and view that brought it in, coarse-stage ranks) "
        "and the candidates the budget left out.",
    )
    filter: dict[str, Any] | None = Field(
        default=None,
        description="Only steps that pass, applied before ranking and packing: equality or "
        'operators ($eq $ne $gt $gte $lt $lte $in $nin $exists) per key, e.g. {"user": '
        '"ana", "time": {"$gte": "2026-05-01T00:00:00Z"}}; keys role, tool, source, time, '
        "updated or a metadata key (dots for nested ones); $and, $or, $not.",
    )


class StepOut(BaseModel):
    """One retrieved step."""

    position: int = Field(description="Position inside its namespace (0 = first added).")
    step_id: int
    namespace: str
    source: str
    role: str
    tool_action: str = Field(description="The tool name; empty for none.")
    cost: int = Field(description="Token cost.")
    rank: int = Field(description="0 for the first step selected, 1 for the next, ...")
    osus: list[str] = Field(description="OSUs of the step as view:key@first-last.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="The step's metadata.")
    time: float | None = Field(
        default=None, description="When it was added (seconds since the epoch)."
    )
    text: str


class RetrieveResponse(BaseModel):
    """The retrieved context: a rendered block for a prompt and the structured steps."""

    namespace: str
    method: str
    budget: int
    cost: int = Field(description="Total token cost of the steps (never above budget).")
    query: str | None
    rendered: str = Field(description="The steps as a context block, in time order.")
    steps: list[StepOut] = Field(description="The steps in selection order.")
    explanation: dict[str, Any] | None = Field(
        default=None,
        description="Why these steps (when asked with explain): per step its score parts, "
        "the budget used and the candidates left out.",
    )

    @classmethod
    def of(cls, result: Retrieved, *, explain: bool = False) -> RetrieveResponse:
        """From the memory's result (with its explanation when ``explain``)."""
        data = result.to_dict(explain=explain)
        return cls(**data, rendered=result.render())


class NamespaceInfo(BaseModel):
    """One namespace and its counts."""

    namespace: str
    steps: int
    held_messages: int = Field(description="Messages held until their tool results arrive.")


class NamespacesResponse(BaseModel):
    """The namespaces holding steps (those this token may use)."""

    namespaces: list[str]


class NamespaceDetailsResponse(NamespacesResponse):
    """The namespaces with their counts (``GET /v1/namespaces?details=true``)."""

    details: list[NamespaceInfo]


class StepRecord(BaseModel):
    """One stored step, as ``GET /v1/namespaces/{ns}/steps`` lists it."""

    position: int
    role: str
    tool_action: str
    cost: int
    source: str
    subgoal: str
    entities: list[str]
    osus: list[str] = Field(description="The step's units as view:key@first-last.")
    text: str


class StepsResponse(BaseModel):
    """A page of the steps of a namespace."""

    namespace: str
    method: str = Field(description="The method whose units are listed.")
    steps_in_namespace: int
    total: int = Field(description="Steps matching the range and pattern.")
    next: int | None = Field(description="Position to continue from (more match), else null.")
    steps: list[StepRecord]


class ImportResponse(BaseModel):
    """What an import did, per namespace: imported, replaced or unchanged."""

    namespaces: dict[str, str]
    steps_written: int


class DeleteResponse(BaseModel):
    """A deleted namespace."""

    namespace: str
    deleted_steps: int


def check_namespace_name(namespace: str) -> None:
    """A namespace is a non-empty name of at most :data:`MAX_NAMESPACE_CHARS` characters
    without control characters."""
    if not namespace:
        raise InvalidInputError("namespace: expected a non-empty name")
    if len(namespace) > MAX_NAMESPACE_CHARS:
        raise InvalidInputError(
            f"namespace: {len(namespace)} characters; at most {MAX_NAMESPACE_CHARS}"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in namespace):
        raise InvalidInputError("namespace: control characters are not allowed")


def error_status(exc: BaseException) -> int:
    """The HTTP status of a library error: 404 for a namespace that holds nothing to
    read or a step it does not hold, 409 for an import that conflicts with the store, 503 for a store that cannot
    be used, 422 for every other library error (bad input: what and where in the
    message), 500 for anything else."""
    from osumem.memory import StoreError
    from osumem.memory.export import ImportConflictError

    if isinstance(exc, UnknownNamespaceError | StepNotFoundError):
        return 404
    if isinstance(exc, ImportConflictError):
        return 409
    if isinstance(exc, InvalidInputError | UnknownMethodError | IncompatibleStoreError):
        return 422  # an import of another encoder's file: the request does not fit
    if isinstance(exc, StoreError):
        return 503
    if isinstance(exc, OSUMemError):
        return 422
    return 500
