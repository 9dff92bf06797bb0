"""OpenAI Agents SDK: the memory as a ``Session``.

:class:`OSUMemSession` keeps a conversation for ``Runner.run(agent, input,
session=...)``: the items themselves in a history session (the SDK's own
``SQLiteSession`` by default, in RAM; pass a file-backed one to keep them), and every
item, as it is added, in the trajectory memory (a user turn, an assistant answer, a
tool call with its result: one step each, in the namespace ``openai-agents:<id>``).
Its ``get_items`` returns the whole history (``budget=None``, what the SDK's sessions
do), or, with a ``budget``, the budgeted context for the next turn: the latest turn
(from the latest user input on) as it is, preceded by one system message holding what
the memory retrieves, of everything before that turn, for that turn's user input,
under that many tokens. (The runner asks for the items before it adds the new input,
so the latest stored turn is the one the new input follows.)::

    session = OSUMemSession("ticket-42", Memory.open("agent.db"), budget=512)
    result = await Runner.run(agent, "Which seat did I pick?", session=session)

``pop_item`` and ``clear_session`` change the trajectory memory with the history (a
popped item's steps are rebuilt from the remaining items; a cleared session deletes
its namespace).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from osumem.errors import InvalidInputError, show_value
from osumem.integrations import missing
from osumem.memory import Memory

try:
    from agents.memory import SQLiteSession
    from agents.memory.session import SessionABC
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing("the OpenAI Agents SDK", "openai_agents", exc) from None

__all__ = ["OSUMemSession", "items_to_messages"]


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dict(dump(exclude_unset=True))
    raise InvalidInputError(f"items: expected response input items (dicts), got {show_value(item)}")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(
            str(part.get("text") or part.get("refusal") or "")
            for part in content
            if isinstance(part, Mapping)
        ).strip()
    return ""


def items_to_messages(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Responses API input items as OpenAI chat messages (what the memory reads): user
    and assistant messages, function calls as assistant tool calls, their outputs as
    tool messages. Items that hold no turn (reasoning, system and developer
    instructions) give none."""
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(items):
        item = _plain(raw)
        kind = item.get("type", "message")
        role = item.get("role")
        if kind == "message" and role in ("user", "assistant"):
            text = _text(item.get("content"))
            if text:
                out.append({"role": role, "content": text})
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise InvalidInputError(f"items[{i}]: a function_call without call_id or name")
            arguments = item.get("arguments") or "{}"
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output, default=str)
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
    return out


class OSUMemSession(SessionABC):
    """A ``Session`` of the OpenAI Agents SDK over the trajectory memory (see the
    module doc).

    Args:
        session_id: the conversation's id.
        memory: the trajectory memory.
        namespace: its namespace (default ``openai-agents:<session_id>``).
        budget: with a budget, ``get_items`` returns the retrieved context plus the
            latest turn (see the module doc); ``None``: the whole history.
        history: where the items themselves are kept (default: a new in-memory
            ``SQLiteSession``).
        method: the retrieval method of the context (default: the memory's).
    """

    def __init__(
        self,
        session_id: str,
        memory: Memory,
        *,
        namespace: str | None = None,
        budget: int | None = None,
        history: Any = None,
        method: str | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInputError(
                f"session_id: expected a non-empty string, got {show_value(session_id)}"
            )
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory: expected an osumem Memory, got {show_value(memory)}")
        self.session_id = session_id
        self.session_settings = None
        self.memory = memory
        self.namespace = namespace or f"openai-agents:{session_id}"
        self.budget = budget
        self.method = method
        self.history = history if history is not None else SQLiteSession(session_id)
        self._lock = asyncio.Lock()

    async def _count(self) -> int:
        return len(await self.history.get_items())

    def _record(self, items: Sequence[Any], first: int) -> list[int]:
        """Add the steps of ``items`` (the history's items ``first``, ``first + 1``, …),
        one add per item in one transaction, each step's metadata naming the item that
        completed it."""
        ids: list[int] = []
        with self.memory.transaction():
            for k, item in enumerate(items, start=first):
                messages = items_to_messages([item])
                if messages:
                    ids += self.memory.add_messages(
                        messages,
                        namespace=self.namespace,
                        log_id=f"{self.session_id}:{k}",
                        metadata={"session": self.session_id, "item": k},
                    )
        return ids

    async def add_items(self, items: list[Any]) -> None:
        """Add items to the history and their steps to the trajectory memory."""
        if not items:
            return
        async with self._lock:
            first = await self._count()
            await self.history.add_items(items)
            await asyncio.to_thread(self._record, list(items), first)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The history (its latest ``limit`` items), or with a ``budget`` the
        retrieved context and the latest turn (see the module doc)."""
        items = await self.history.get_items()
        if self.budget is None:
            return items if limit is None else items[-limit:] if limit > 0 else []
        last = next(
            (i for i in range(len(items) - 1, -1, -1) if _plain(items[i]).get("role") == "user"),
            None,
        )
        if last is None:
            return items if limit is None else items[-limit:] if limit > 0 else []
        turn = items[last:] if limit is None else items[last:][-limit:] if limit > 0 else []
        query = _text(_plain(items[last]).get("content")) or "the conversation so far"
        context = await asyncio.to_thread(self._context, query, last)
        return ([context] if context is not None else []) + list(turn)

    def _context(self, query: str, before_item: int) -> dict[str, Any] | None:
        if not self.memory.n_steps(self.namespace):
            return None
        found = self.memory.retrieve(
            query,
            self.budget,
            namespace=self.namespace,
            method=self.method,
            filter={"item": {"$lt": before_item}},
        )
        if not found.steps:
            return None
        return {"role": "system", "content": found.render()}

    async def pop_item(self) -> Any | None:
        """Remove and return the latest item; the trajectory memory is rebuilt from the
        items that remain."""
        async with self._lock:
            item = await self.history.pop_item()
            if item is not None:
                rest = await self.history.get_items()
                await asyncio.to_thread(self._rebuild, rest)
            return item

    def _rebuild(self, items: Sequence[Any]) -> None:
        with self.memory.transaction():
            self.memory.delete_namespace(self.namespace)
            self._record(items, 0)

    async def clear_session(self) -> None:
        """Clear the history and delete the session's namespace of the memory."""
        async with self._lock:
            await self.history.clear_session()
            await asyncio.to_thread(self.memory.delete_namespace, self.namespace)
