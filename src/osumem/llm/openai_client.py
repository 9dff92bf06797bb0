"""A client for any OpenAI-compatible chat-completions endpoint (a hosted model or a
local server such as vLLM, llama.cpp's server or Ollama), over ``httpx``.

Configuration comes from the environment unless given:

* ``OSUMEM_LLM_BASE_URL`` — e.g. ``http://localhost:8000/v1`` (default
  ``https://api.openai.com/v1``);
* ``OSUMEM_LLM_MODEL`` — the model name the endpoint expects (required);
* ``OSUMEM_LLM_API_KEY`` — the bearer key (falls back to ``OPENAI_API_KEY``; may be
  empty for local servers).

Decoding is greedy (``temperature = 0``) with a fixed ``seed``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from osumem.llm.base import Chat, LLMError, check_max_tokens

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def yes_share(top_logprobs: Sequence[dict[str, Any]], answer: str) -> float:
    """``P(yes) / (P(yes) + P(no))`` from the first token's top log-probabilities
    (tokens compared after stripping and lower-casing). When neither appears among
    them, the answer text decides: 1.0 if it starts with "yes", else 0.0."""
    p_yes = p_no = 0.0
    for item in top_logprobs:
        tok = str(item.get("token", "")).strip().lower()
        lp = item.get("logprob")
        if not isinstance(lp, (int, float)):
            continue
        if tok == "yes":
            p_yes += math.exp(lp)
        elif tok == "no":
            p_no += math.exp(lp)
    if p_yes + p_no > 0:
        return p_yes / (p_yes + p_no)
    return 1.0 if answer.strip().lower().startswith("yes") else 0.0


class OpenAIClient:
    """Chat completions over HTTP. Never called by the test suite (no network)."""

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        seed: int = 0,
        timeout_s: float = 120.0,
    ) -> None:
        self.model = model or os.environ.get("OSUMEM_LLM_MODEL", "")
        if not self.model:
            raise LLMError(
                "OpenAI-compatible client: no model name; set OSUMEM_LLM_MODEL or pass "
                "--llm openai:MODEL"
            )
        self.base_url = (
            base_url or os.environ.get("OSUMEM_LLM_BASE_URL") or DEFAULT_BASE_URL
        ).rstrip("/")
        self._key = (
            api_key or os.environ.get("OSUMEM_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY", "")
        )
        self.seed = seed
        self.timeout_s = timeout_s

    @property
    def model_id(self) -> str:
        return f"openai:{self.base_url}:{self.model}:greedy:seed{self.seed}"

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - httpx is a declared extra
            raise LLMError(
                "the OpenAI-compatible client needs httpx: pip install 'osumem[llm]'"
            ) from exc
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        try:
            resp = httpx.post(
                f"{self.base_url}/chat/completions",
                json={"model": self.model, "temperature": 0, "seed": self.seed, **payload},
                headers=headers,
                timeout=self.timeout_s,
            )
        except httpx.HTTPError as exc:
            raise LLMError(f"{self.base_url}: request failed: {exc}") from exc
        if resp.status_code != 200:
            raise LLMError(f"{self.base_url}: HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            data: dict[str, Any] = resp.json()
            data["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"{self.base_url}: not a chat-completions response") from exc
        return data

    def complete(self, messages: Chat, *, max_tokens: int) -> str:
        """The greedy answer."""
        data = self._post(
            {
                "messages": [m.to_dict() for m in messages],
                "max_tokens": check_max_tokens(max_tokens),
            }
        )
        return str(data["choices"][0].get("message", {}).get("content") or "")

    def yes_probability(self, chats: Sequence[Chat]) -> list[float]:
        """One request per chat: one answer token with its top log-probabilities."""
        out = []
        for chat in chats:
            data = self._post(
                {
                    "messages": [m.to_dict() for m in chat],
                    "max_tokens": 1,
                    "logprobs": True,
                    "top_logprobs": 20,
                }
            )
            choice = data["choices"][0]
            answer = str(choice.get("message", {}).get("content") or "")
            content = (choice.get("logprobs") or {}).get("content") or []
            top = content[0].get("top_logprobs", []) if content else []
            out.append(yes_share(top, answer))
        return out
