"""The agent-facing memory: add steps or chat messages as the agent runs, retrieve the
past steps that support a query under a token budget.

>>> from osumem.memory import Memory
>>> with Memory.open("mem.db", encoder="hashing") as mem:          # doctest: +SKIP
...     mem.add_messages(messages, namespace="task-7")
...     print(mem.retrieve("which flight did the user book?", 256,
...                        namespace="task-7").render())

Each namespace is its own episode: its own positions, view and retriever; nothing
crosses namespaces. Every add is one store transaction, validated before anything is
written, and then brings the namespace's retriever up to date through
``Retriever.update`` (OSU-Mem adds the new steps to its pool without a rebuild). The
retriever is built lazily at the first retrieval of a namespace by replaying the
store's add-batch boundaries (``fit`` on the first batch, ``update`` on each next
one), so a reopened store answers exactly as the session that wrote it did.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Self

import numpy as np
from numpy.typing import NDArray

from osumem.annotate import DEFAULT_BOILERPLATE
from osumem.embed import Encoder
from osumem.errors import DimensionError, InvalidInputError
from osumem.memory.encoders import EXTERNAL_PREFIX, resolve_encoder
from osumem.memory.retrieved import Retrieved, RetrievedStep, osu_handles
from osumem.memory.store import (
    IncompatibleStoreError,
    MemoryStore,
    NamespaceData,
    StepRow,
)
from osumem.memory.validate import (
    OversizedInputError,
    check_message_sizes,
    check_namespace,
    continue_segments,
    open_call_start,
    step_row,
)
from osumem.retrieve.base import Retriever, check_budget
from osumem.types import MemoryView, Step, l2_normalise

#: The namespace used when none is given.
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """Settings of a :class:`Memory` (all keyword-only, validated on construction).

    Attributes:
        method: registered retrieval method (``osumem list`` / ``osumem methods``).
        params: parameter overrides of the method's config.
        seed: seed of the retriever (similarity-view communities); fixed so a reopened
            store rebuilds the same structure.
        budget: default token budget of :meth:`Memory.retrieve`.
        max_text_chars: longest accepted step or message text, in characters.
        boilerplate: tool names that get no tool signature (no tool OSU).
        prefix_namespace: prefix entities and tool signatures with the step's source
            name (set it when one namespace holds several unrelated episodes).
        replay_batches: rebuild a reopened namespace along its add-batch boundaries
            (identical results to the writing session) rather than in one ``fit``.
    """

    method: str = "osumem"
    params: Mapping[str, Any] | None = None
    seed: int = 0
    budget: int = 256
    max_text_chars: int = 100_000
    boilerplate: frozenset[str] = DEFAULT_BOILERPLATE
    prefix_namespace: bool = False
    replay_batches: bool = True

    def __post_init__(self) -> None:
        from osumem.retrieve.registry import make_config

        check_budget(self.budget)
        if isinstance(self.max_text_chars, bool) or self.max_text_chars < 1:
            raise InvalidInputError(f"max_text_chars must be >= 1, got {self.max_text_chars}")
        make_config(self.method, self.params)  # unknown method / parameter fails here


class Memory:
    """An incremental, optionally persistent trajectory memory. Use :meth:`open`."""

    def __init__(
        self,
        store: MemoryStore,
        encoder: Encoder | None,
        config: MemoryConfig,
        *,
        encoder_spec: str | None = None,
        owns_encoder: bool = False,
    ) -> None:
        self.store = store
        self.config = config
        self._encoder = encoder
        self._encoder_spec = encoder_spec
        self._owns_encoder = owns_encoder or encoder_spec is not None
        self._data: dict[str, NamespaceData] = {}
        self._retrievers: dict[str, tuple[Retriever, int]] = {}
        self._causal_cache: tuple[tuple[str, int, int], Retriever] | None = None

    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        encoder: Encoder | str | Path | None = None,
        method: str = "osumem",
        params: Mapping[str, Any] | None = None,
        seed: int = 0,
        budget: int = 256,
        **settings: Any,
    ) -> Memory:
        """Open (or create) a memory.

        Args:
            path: SQLite file of the persistent store; ``None`` keeps it in memory.
            encoder: an :class:`~osumem.embed.Encoder`, or a name resolved by
                :func:`~osumem.memory.encoders.resolve_encoder` (``"sbert"``,
                ``"hashing"``, a model path). ``None``: the encoder the store recorded,
                or SBERT for a new store, loaded at the first text to encode.
            method, params, seed, budget: see :class:`MemoryConfig`.
            settings: the other :class:`MemoryConfig` fields.

        Raises:
            IncompatibleStoreError: the file is not a store of this version, or was
                made with another encoder than ``encoder``.
        """
        config = MemoryConfig(method=method, params=params, seed=seed, budget=budget, **settings)
        store = MemoryStore(path)
        try:
            enc = resolve_encoder(encoder)
            recorded = store.model_id
            known = bool(recorded) and not recorded.startswith(EXTERNAL_PREFIX)
            if enc is not None and known and (enc.model_id != recorded or enc.dim != store.dim):
                raise IncompatibleStoreError(
                    f"memory store {path}: made with encoder {recorded!r} (dim "
                    f"{store.dim}); opened with {enc.model_id!r} (dim {enc.dim})"
                )
        except BaseException:
            store.close()
            raise
        return cls(
            store,
            enc,
            config,
            encoder_spec=None if enc is not None else (recorded or "sbert"),
            owns_encoder=enc is not None and not isinstance(encoder, Encoder),
        )

    # --- encoder --------------------------------------------------------------------

    @property
    def encoder(self) -> Encoder | None:
        """The encoder (loaded on first use); ``None`` for a vectors-only store."""
        if self._encoder is None and self._encoder_spec:
            self._encoder = resolve_encoder(self._encoder_spec)
            self._encoder_spec = None
        return self._encoder

    def _need_encoder(self, what: str) -> Encoder:
        enc = self.encoder
        if enc is None:
            raise InvalidInputError(
                f"{what}: this memory has no encoder (store model {self.store.model_id!r}); "
                "pass vectors, or open it with encoder=..."
            )
        return enc

    # --- reading --------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        """Namespaces holding steps (or held messages), sorted."""
        return self.store.namespaces()

    def n_steps(self, namespace: str = DEFAULT_NAMESPACE) -> int:
        """Number of steps in ``namespace``."""
        return self.store.n_steps(namespace)

    def view(self, namespace: str = DEFAULT_NAMESPACE) -> MemoryView:
        """The columnar view of ``namespace`` (what the retriever reads)."""
        return self._namespace(namespace).view

    def retriever(self, namespace: str = DEFAULT_NAMESPACE) -> Retriever | None:
        """The namespace's retriever, brought up to date (``None`` while it is empty)."""
        return self._sync(namespace)

    def _namespace(self, namespace: str) -> NamespaceData:
        data = self._data.get(namespace)
        if data is None:
            data = self.store.load(namespace)
            self._data[namespace] = data
        return data

    def _sync(self, namespace: str) -> Retriever | None:

        data = self._namespace(namespace)
        if data.view.n == 0:
            return None
        retriever, fitted = self._retrievers.get(namespace, (None, 0))
        retriever, fitted = self._replay(data, data.view.n, retriever, fitted)
        self._retrievers[namespace] = (retriever, fitted)
        return retriever

    def _replay(
        self, data: NamespaceData, upto: int, retriever: Retriever | None = None, fitted: int = 0
    ) -> tuple[Retriever, int]:
        """Bring ``retriever`` (a new one when ``None``) from ``fitted`` steps up to
        ``upto`` along the stored add boundaries, as the writing session did."""
        from osumem.retrieve.registry import create

        if retriever is None:
            retriever = create(self.config.method, self.config.params, seed=self.config.seed)
        ends = data.batch_ends if self.config.replay_batches or fitted else (data.view.n,)
        for end in [*(e for e in ends if fitted < e < upto), upto]:
            if end <= fitted:
                continue
            v = data.view.prefix(end)
            retriever = retriever.fit(v) if fitted == 0 else retriever.update(v)
            fitted = end
        return retriever, fitted

    def _causal(self, namespace: str, before: int) -> Retriever:
        """A retriever built from the steps before ``before`` only (no later step can
        shape its OSUs, tree or partitions); the last one is kept for repeated calls."""
        data = self._namespace(namespace)
        key = (namespace, before, data.view.n)
        cached = self._causal_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        retriever, _ = self._replay(data, before)
        self._causal_cache = (key, retriever)
        return retriever

    def retrieve(
        self,
        query: str | NDArray[Any] | Sequence[float],
        budget: int | None = None,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        before: int | None = None,
    ) -> Retrieved:
        """Select past steps of ``namespace`` for ``query`` under ``budget`` tokens.

        Args:
            query: a text (encoded with the memory's encoder) or a query vector.
            budget: token budget (default: the memory's ``budget``).
            namespace: which episode to search.
            before: only steps at positions ``< before`` (causality); ``None``: all.
                The answer is what the memory would have given right after step
                ``before - 1`` was added: the structure is rebuilt from those steps
                alone, so later steps cannot influence it.
        """
        b = check_budget(self.config.budget if budget is None else budget)
        if before is not None and (isinstance(before, bool) or not isinstance(before, int)):
            raise InvalidInputError(f"before: expected an integer position, got {before!r}")
        if before is not None and before < 0:
            raise InvalidInputError(f"before: expected a position >= 0, got {before}")
        text = query if isinstance(query, str) else None
        if isinstance(query, str):
            q = self._need_encoder("retrieve(query text)").encode([query])[0]
        else:
            q = np.asarray(query, dtype=np.float32)
            dim = self.store.dim
            if q.ndim != 1:
                raise DimensionError(f"query: expected a 1-d vector, got shape {q.shape}")
            if dim and q.shape[0] != dim:
                raise DimensionError(
                    f"query: vector has dimension {q.shape[0]}, the memory store has {dim} "
                    f"(model {self.store.model_id!r})"
                )
        retriever = self._sync(namespace)
        if retriever is None or before == 0:
            return Retrieved(namespace, self.config.method, b, (), text)
        data = self._namespace(namespace)
        if before is not None and before < data.view.n:
            retriever = self._causal(namespace, before)
        sel = retriever.retrieve(q, b)
        handles = osu_handles(retriever, sel.positions)
        v = data.view
        steps = tuple(
            RetrievedStep(
                position=int(p),
                step_id=int(data.step_ids[p]),
                namespace=namespace,
                source=str(v.namespaces[p]),
                role=str(v.roles[p]),
                text=str(v.texts[p]),
                tool_action=str(v.tool_actions[p]),
                cost=int(v.costs[p]),
                osus=handles[rank],
                rank=rank,
            )
            for rank, p in enumerate(sel.positions.tolist())
        )
        return Retrieved(namespace, self.config.method, b, steps, text)

    # --- writing --------------------------------------------------------------------

    def add_steps(
        self,
        steps: Sequence[Step],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        embeddings: NDArray[Any] | None = None,
    ) -> list[int]:
        """Append ``steps`` to ``namespace`` (one transaction) and return their step ids.

        Each :class:`~osumem.types.Step` keeps its own annotations and ``cost`` (its
        token cost). ``embeddings`` (one row per step) are used as given; without them
        the step texts are encoded. A step with an empty ``namespace`` gets
        ``namespace`` as its source name. Nothing is written if any step is invalid.
        """
        check_namespace(namespace)
        if isinstance(steps, Step) or not isinstance(steps, Sequence):
            raise InvalidInputError("steps: expected a list of Step records")
        rows = [
            step_row(s, f"steps[{i}]", namespace, self.config.max_text_chars)
            for i, s in enumerate(steps)
        ]
        return self._append(namespace, rows, embeddings, pending=None)

    def add_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        source: str | None = None,
        prefix_namespace: bool | None = None,
        hold_open_calls: bool = True,
    ) -> list[int]:
        """Append OpenAI-format chat messages to ``namespace``; return the new step ids.

        Messages become steps as :func:`osumem.ingest.openai_chat.read_messages`
        defines (one per user message, assistant text and tool call; a tool response
        is its call's observation). The messages may come a few at a time: when the
        last assistant message's tool calls have no response yet and
        ``hold_open_calls`` is set, that message is held (stored, not yet a step) and
        joins the next add, so its step carries the response. Subgoal segments and
        tool-call matching continue across adds. Nothing is written if any message is
        invalid.

        Args:
            source: the steps' source name (default: ``namespace``); it labels subgoals
                and, with ``prefix_namespace``, prefixes entities and signatures.
            prefix_namespace: default: the memory's ``prefix_namespace`` setting.
        """
        from osumem.ingest.openai_chat import read_messages

        check_namespace(namespace)
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
            raise InvalidInputError("messages: expected a list of message dicts")
        check_message_sizes(messages, self.config.max_text_chars)
        held = self.store.pending(namespace)
        combined = [*held, *messages]
        where = "messages" if not held else f"held+messages (the first {len(held)} held)"
        cut = open_call_start(combined) if hold_open_calls else len(combined)
        src = namespace if source is None else source
        prefix = self.config.prefix_namespace if prefix_namespace is None else prefix_namespace
        read = functools.partial(
            read_messages,
            namespace=src,
            boilerplate=self.config.boilerplate,
            prefix_namespace=prefix,
            where=where,
        )
        read(combined)  # validates all, indices as given
        steps = read(combined[:cut])
        new_held = combined[cut:]
        try:
            json.dumps(new_held)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"{where}: held messages are not JSON data ({exc})") from None
        steps = continue_segments(steps, self.store.count_role(namespace, "user"), src)
        for i, s in enumerate(steps):
            if len(s.text) > self.config.max_text_chars:
                raise OversizedInputError(
                    f"{where}: step {i} ({s.role}) text has {len(s.text)} characters; "
                    f"max_text_chars is {self.config.max_text_chars}"
                )
        for i, s in enumerate(steps):  # reject bad text before any tokenizer sees it
            step_row(s, f"{where}: step {i}", namespace, self.config.max_text_chars)
        enc = self._need_encoder("add_messages") if steps else None
        if enc is not None:
            costs = enc.count_tokens([s.text for s in steps])
            steps = [replace(s, cost=int(c)) for s, c in zip(steps, costs, strict=True)]
        rows = [
            step_row(s, f"{where}: step {i}", namespace, self.config.max_text_chars)
            for i, s in enumerate(steps)
        ]
        return self._append(namespace, rows, None, pending=new_held)

    def _append(
        self,
        namespace: str,
        rows: list[StepRow],
        embeddings: NDArray[Any] | None,
        *,
        pending: Sequence[Mapping[str, Any]] | None,
    ) -> list[int]:
        store_dim = self.store.dim
        if embeddings is None:
            if rows:
                enc = self._need_encoder("add (steps without embeddings)")
                emb = enc.encode([r.text for r in rows])
                where = f"encoder {enc.model_id}"
            else:
                emb = np.zeros((0, store_dim), dtype=np.float32)
                where = "embeddings"
        else:
            emb = np.asarray(embeddings, dtype=np.float32)
            where = "embeddings"
        if emb.ndim != 2 or emb.shape[0] != len(rows):
            raise DimensionError(f"{where}: expected shape ({len(rows)}, d), got {emb.shape}")
        if rows and store_dim and emb.shape[1] != store_dim:
            raise DimensionError(
                f"{where}: vectors of dimension {emb.shape[1]}, the memory store holds "
                f"dimension {store_dim} (model {self.store.model_id!r})"
            )
        own = self._encoder
        # a first add of given vectors must match the encoder the store will record
        if (
            embeddings is not None
            and rows
            and not store_dim
            and own is not None
            and (emb.shape[1] != own.dim)
        ):
            raise DimensionError(
                f"embeddings: vectors of dimension {emb.shape[1]}, the memory's encoder "
                f"{own.model_id!r} has dimension {own.dim}"
            )
        emb = l2_normalise(emb, what=where) if rows else emb
        model_id = self._model_id_for(embeddings is not None, emb.shape[1])
        ids = self.store.append(namespace, rows, emb, model_id=model_id, pending=pending)
        if model_id.startswith(EXTERNAL_PREFIX) and self._encoder is None:
            self._encoder_spec = None  # a vectors-only store: never guess an encoder
        if rows:
            self._extend_cache(namespace, rows, emb, ids)
        return ids

    def _model_id_for(self, external: bool, dim: int) -> str:
        recorded = self.store.model_id
        if recorded:
            return recorded
        enc = self._encoder if external else self.encoder
        return enc.model_id if enc is not None else f"{EXTERNAL_PREFIX}:d{dim}"

    def _extend_cache(
        self, namespace: str, rows: list[StepRow], emb: NDArray[np.float32], ids: list[int]
    ) -> None:
        """Append the committed rows to the cached view (the same bytes the store now
        holds, so the live view equals a reloaded one)."""
        old = self._data.get(namespace)
        if old is None:
            return
        v = old.view

        def cat(column: NDArray[Any], values: Iterable[Any]) -> NDArray[Any]:
            new = np.empty(len(rows), dtype=object)
            new[:] = list(values)
            return np.concatenate([column, new])

        view = MemoryView(
            embeddings=np.concatenate([v.embeddings.reshape(-1, emb.shape[1]), emb]),
            costs=np.concatenate([v.costs, np.array([r.cost for r in rows], dtype=np.int64)]),
            tool_actions=cat(v.tool_actions, (r.tool_action for r in rows)),
            tool_signatures=cat(v.tool_signatures, (r.tool_signature for r in rows)),
            entities=v.entities + tuple(frozenset(r.entities) for r in rows),
            subgoals=cat(v.subgoals, (r.subgoal for r in rows)),
            namespaces=cat(v.namespaces, (r.source for r in rows)),
            roles=cat(v.roles, (r.role for r in rows)),
            texts=cat(v.texts, (r.text for r in rows)),
        )
        self._data[namespace] = NamespaceData(
            view=view,
            step_ids=np.concatenate([old.step_ids, np.asarray(ids, dtype=np.int64)]),
            arguments=old.arguments + tuple(r.arguments_json for r in rows),
            batch_ends=(*old.batch_ends, v.n + len(rows)),
        )

    # --- lifecycle ------------------------------------------------------------------

    def check(self) -> None:
        """Run the store's integrity check (raises ``StoreIntegrityError``)."""
        self.store.check()

    def close(self) -> None:
        """Close the store and, if this memory opened it, the encoder's cache."""
        self.store.close()
        close = getattr(self._encoder, "close", None)
        if self._owns_encoder and callable(close):
            close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
