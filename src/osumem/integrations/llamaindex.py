"""LlamaIndex: the memory as a memory block.

:class:`OSUMemBlock` is a ``llama_index.core.memory.BaseMemoryBlock``: give it to
``Memory.from_defaults(memory_blocks=[OSUMemBlock(memory=...)])`` and the messages
LlamaIndex flushes out of its short-term chat history are stored in the trajectory
memory (one step per user turn, assistant answer and tool call with its result), and
every ``get`` puts, into the prompt's memory section, the past steps the memory
retrieves for the latest user message under ``budget`` tokens::

    block = OSUMemBlock(memory=Memory.open("agent.db"), namespace="chat-7", budget=256)
    chat_memory = LlamaMemory.from_defaults(session_id="chat-7", memory_blocks=[block])
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from osumem.integrations import missing
from osumem.memory import Memory

try:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.memory import BaseMemoryBlock
    from pydantic import ConfigDict, Field, PrivateAttr
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing("llama-index-core", "llamaindex", exc) from None

__all__ = ["OSUMemBlock", "chat_messages"]


def chat_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """LlamaIndex chat messages as OpenAI chat messages: user and assistant text, an
    assistant's tool calls (OpenAI-style ``tool_calls`` in ``additional_kwargs``) and
    tool results (``tool_call_id``); system messages give none."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.role.value if isinstance(m.role, MessageRole) else str(m.role)
        text = m.content or ""
        extra = m.additional_kwargs or {}
        if role == MessageRole.USER.value and text.strip():
            out.append({"role": "user", "content": text})
        elif role == MessageRole.ASSISTANT.value:
            calls = extra.get("tool_calls")
            msg: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                msg["tool_calls"] = [c if isinstance(c, dict) else c.model_dump() for c in calls]
            if text.strip() or calls:
                out.append(msg)
        elif role == MessageRole.TOOL.value and extra.get("tool_call_id"):
            out.append({"role": "tool", "tool_call_id": extra["tool_call_id"], "content": text})
    return out


class OSUMemBlock(BaseMemoryBlock[str]):
    """A LlamaIndex memory block over a :class:`~osumem.memory.Memory` (see the module
    doc).

    Attributes:
        memory: the trajectory memory.
        namespace: its namespace for this chat.
        budget: token budget of the retrieved steps (default: the memory's).
        method: the retrieval method (default: the memory's).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field(default="trajectory_memory")
    description: str | None = Field(
        default="Past steps of this conversation, retrieved for the latest message."
    )
    memory: Memory
    namespace: str = "default"
    budget: int | None = None
    method: str | None = None
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def _context(self, messages: list[ChatMessage] | None) -> str:
        question = next(
            (m for m in reversed(messages or []) if m.role == MessageRole.USER and m.content),
            None,
        )
        with self._lock:
            if question is None or not self.memory.n_steps(self.namespace):
                return ""
            found = self.memory.retrieve(
                str(question.content), self.budget, namespace=self.namespace, method=self.method
            )
        return found.render() if found.steps else ""

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        return await asyncio.to_thread(self._context, messages)

    def _store(self, messages: list[ChatMessage]) -> None:
        converted = chat_messages(messages)
        if converted:
            with self._lock:
                self.memory.add_messages(converted, namespace=self.namespace, on_duplicate="append")

    async def _aput(self, messages: list[ChatMessage]) -> None:
        await asyncio.to_thread(self._store, messages)
