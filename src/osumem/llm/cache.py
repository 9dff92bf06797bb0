"""An on-disk SQLite cache of LLM responses keyed by (model, request), so a rerun of
the evidence-selection stage is free. Same conventions as the embedding cache in
:mod:`osumem.embed`: one file, WAL, safe for several processes."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from osumem.embed import DEFAULT_CACHE_DIR
from osumem.llm.base import Chat, LLMClient, check_max_tokens


def request_key(model_id: str, kind: str, payload: Any) -> bytes:
    """The cache key: SHA-256 of the model id, the request kind and the canonical JSON
    of the request (messages and bounds)."""
    text = json.dumps([model_id, kind, payload], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).digest()


def _chat_payload(messages: Chat) -> list[list[str]]:
    return [[m.role, m.content] for m in messages]


class CachedClient:
    """Wraps an :class:`~osumem.llm.base.LLMClient`; answers found in the cache are
    returned without calling the model. ``hits`` / ``misses`` count lookups."""

    def __init__(self, client: LLMClient, cache_path: str | Path | None = None) -> None:
        self._client = client
        path = Path(cache_path) if cache_path is not None else DEFAULT_CACHE_DIR / "llm.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(path), timeout=60, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS llm (key BLOB PRIMARY KEY, model TEXT, response TEXT)"
        )
        self._conn.commit()

    @property
    def model_id(self) -> str:
        return self._client.model_id

    @property
    def client(self) -> LLMClient:
        """The wrapped client."""
        return self._client

    def _get(self, key: bytes) -> Any | None:
        with self._lock:
            row = self._conn.execute("SELECT response FROM llm WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def _put(self, items: Sequence[tuple[bytes, Any]]) -> None:
        with self._lock:
            self._conn.executemany(
                "INSERT OR REPLACE INTO llm (key, model, response) VALUES (?, ?, ?)",
                [(k, self.model_id, json.dumps(v)) for k, v in items],
            )
            self._conn.commit()

    def complete(self, messages: Chat, *, max_tokens: int) -> str:
        """The cached answer, or the wrapped client's (then stored)."""
        check_max_tokens(max_tokens)
        key = request_key(self.model_id, "complete", [_chat_payload(messages), max_tokens])
        got = self._get(key)
        if got is not None:
            self.hits += 1
            return str(got)
        self.misses += 1
        answer = self._client.complete(messages, max_tokens=max_tokens)
        self._put([(key, answer)])
        return answer

    def yes_probability(self, chats: Sequence[Chat]) -> list[float]:
        """Cached probabilities; only the chats missing from the cache go to the model
        (in one call, so a local model can share their common prefix)."""
        keys = [request_key(self.model_id, "yes", _chat_payload(c)) for c in chats]
        out: list[float | None] = [self._get(k) for k in keys]
        missing = [i for i, v in enumerate(out) if v is None]
        self.hits += len(chats) - len(missing)
        self.misses += len(missing)
        if missing:
            probs = self._client.yes_probability([chats[i] for i in missing])
            self._put([(keys[i], float(p)) for i, p in zip(missing, probs, strict=True)])
            for i, p in zip(missing, probs, strict=True):
                out[i] = float(p)
        return [float(v) for v in out if v is not None]

    def close(self) -> None:
        """Close the cache database."""
        self._conn.close()

    def __enter__(self) -> CachedClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
