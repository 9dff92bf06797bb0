"""The LLM client interface: chat messages in, a greedy answer or a yes-probability out.

Two operations cover what the evidence-selection stage needs:

* :meth:`LLMClient.complete` — the model's greedy answer to a chat (deterministic);
* :meth:`LLMClient.yes_probability` — for each chat, ``P(yes) / (P(yes) + P(no))`` of
  the first answer token: a per-question relevance score in ``[0, 1]``.

Implementations: :class:`osumem.llm.local.LocalClient` (an embedded instruct model,
offline on CPU), :class:`osumem.llm.openai_client.OpenAIClient` (any OpenAI-compatible
chat endpoint) and :class:`osumem.llm.cache.CachedClient` (an on-disk cache in front of
either).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from osumem.errors import InvalidInputError, OSUMemError

ROLES = ("system", "user", "assistant")


class LLMError(OSUMemError):
    """The model could not be loaded or called (missing extra, endpoint error)."""


@dataclass(frozen=True)
class Message:
    """One chat message."""

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidInputError(f"message role must be one of {ROLES}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise InvalidInputError("message content must be a string")

    def to_dict(self) -> dict[str, str]:
        """The OpenAI wire form ``{"role": ..., "content": ...}``."""
        return {"role": self.role, "content": self.content}


Chat = Sequence[Message]


@runtime_checkable
class LLMClient(Protocol):
    """What the evidence-selection stage needs from a language model."""

    @property
    def model_id(self) -> str:
        """A stable identifier of the model and decoding settings (the cache key)."""
        ...

    def complete(self, messages: Chat, *, max_tokens: int) -> str:
        """The greedy (deterministic) answer to ``messages``, at most ``max_tokens``."""
        ...

    def yes_probability(self, chats: Sequence[Chat]) -> list[float]:
        """For each chat, ``P(yes) / (P(yes) + P(no))`` of the first answer token."""
        ...


def check_max_tokens(max_tokens: int) -> int:
    """Validate a generation bound."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidInputError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    return max_tokens
