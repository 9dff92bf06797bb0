"""Language models for the evidence-selection stage: a client interface, an embedded
offline model, an OpenAI-compatible HTTP client, an on-disk response cache, and the
evidence prompts.

``make_client("local")`` gives the embedded SmolLM2-135M-Instruct;
``make_client("openai:gpt-4o-mini")`` (or ``"openai"`` with ``OSUMEM_LLM_MODEL``) any
OpenAI-compatible endpoint (``OSUMEM_LLM_BASE_URL``, ``OSUMEM_LLM_API_KEY``). Heavy
libraries are imported only when a model is loaded.
"""

from __future__ import annotations

from pathlib import Path

from osumem.llm.base import Chat, LLMClient, LLMError, Message
from osumem.llm.cache import CachedClient
from osumem.llm.evidence import (
    EvidenceAnswer,
    PromptConfig,
    Selection,
    ask_evidence,
    parse_selection,
    relevance_messages,
    selection_messages,
)

__all__ = [
    "CachedClient",
    "Chat",
    "EvidenceAnswer",
    "LLMClient",
    "LLMError",
    "Message",
    "PromptConfig",
    "Selection",
    "ask_evidence",
    "make_client",
    "parse_selection",
    "relevance_messages",
    "selection_messages",
]


def make_client(spec: str, *, cache: str | Path | bool | None = True) -> LLMClient:
    """A client from a short spec, wrapped in the response cache unless ``cache`` is
    False (``cache`` may name the cache file).

    Specs: ``local`` (the embedded model), ``local:PATH.gguf`` (another local GGUF
    instruct model), ``openai`` / ``openai:MODEL`` (an OpenAI-compatible endpoint).
    """
    kind, _, arg = spec.partition(":")
    client: LLMClient
    if kind == "local":
        from osumem.llm.local import LocalClient

        client = LocalClient(arg or None)
    elif kind == "openai":
        from osumem.llm.openai_client import OpenAIClient

        client = OpenAIClient(model=arg or None)
    else:
        raise LLMError(f"unknown LLM {spec!r}: expected local, local:PATH, openai or openai:MODEL")
    if cache is False:
        return client
    return CachedClient(client, None if cache in (None, True) else Path(cache))  # type: ignore[arg-type]
