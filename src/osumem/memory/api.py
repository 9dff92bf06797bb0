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
one), so a reopened store answers exactly as the session that wrote it did; a stored
snapshot of the structure (written at close and as the memory grows, see
:mod:`osumem.memory.snapshot`) lets it replay only the batches after the snapshot.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
from numpy.typing import NDArray

from osumem.annotate import DEFAULT_BOILERPLATE
from osumem.embed import Encoder, as_encoder
from osumem.errors import (
    BudgetError,
    ConfigError,
    DimensionError,
    DuplicateInputError,
    InvalidInputError,
    NonFiniteError,
    StoreError,
)
from osumem.frozen import Constraints, FrozenConfig, Interval, Options
from osumem.memory import snapshot
from osumem.memory.buffer import NamespaceBuffer
from osumem.memory.encoders import EXTERNAL_PREFIX, check_available, resolve_encoder
from osumem.memory.explain import Explanation, explainer
from osumem.memory.held import HeldSnapshot, check_answers, split_held
from osumem.memory.retrieved import Retrieved, RetrievedStep, osu_handles
from osumem.memory.store import (
    IncompatibleStoreError,
    MemoryStore,
    NamespaceData,
    StepRow,
    remove_store_files,
)
from osumem.memory.validate import (
    OversizedInputError,
    _show,
    check_messages,
    check_namespace,
    continue_segments,
    log_digest,
    open_call_start,
    step_row,
)
from osumem.retrieve.base import Retriever, check_budget
from osumem.types import MemoryView, Step, l2_normalise

#: The namespace used when none is given.
DEFAULT_NAMESPACE = "default"
#: What an add does with a log the namespace already holds (see ``on_duplicate``).
ON_DUPLICATE = ("append", "skip", "error")
#: Memory size from which a memory's whole-memory queries use the HNSW indexes
#: (``MemoryConfig.ann_min_steps``). Below it they scan exactly: answers are exact and
#: a reopened memory builds no index before its first answer (docs/decisions.md).
MEMORY_ANN_MIN_STEPS = 100_000


@dataclass(frozen=True, kw_only=True)
class MemoryConfig(FrozenConfig):
    """Settings of a :class:`Memory` (all keyword-only, validated on construction:
    a bad ``budget`` raises :class:`~osumem.errors.BudgetError`, a bad
    ``max_text_chars`` or ``ann_min_steps`` one :class:`~osumem.errors.ConfigError`
    naming each, an unknown ``method`` :class:`~osumem.errors.UnknownMethodError`, bad
    ``params`` the method config's :class:`~osumem.errors.ConfigError`).

    Attributes:
        method: registered retrieval method (``osumem list`` / ``osumem methods``).
        params: parameter overrides of the method's config.
        seed: seed of the retriever (similarity-view communities); fixed so a reopened
            store rebuilds the same structure.
        budget: default token budget of :meth:`Memory.retrieve`.
        max_text_chars: longest accepted step or message text, in characters; also
            the bound of every other stored string (argument values, keys, labels);
            a whole message may hold ``2 * max_text_chars + 4096`` characters.
        boilerplate: tool names that get no tool signature (no tool OSU).
        prefix_namespace: prefix entities and tool signatures with the step's source
            name (set it when one namespace holds several unrelated episodes).
        replay_batches: rebuild a reopened namespace along its add-batch boundaries
            (identical results to the writing session) rather than in one ``fit``.
        ann_min_steps: from this many steps in a namespace on, queries over all of it
            take their candidates from HNSW indexes (hnswlib, the ``scale`` extra),
            built when the namespace is loaded; below it they scan exactly.
        on_duplicate: the default of :meth:`Memory.add_messages`' ``on_duplicate``
            (``"skip"``; ``"append"`` for an agent that repeats messages on purpose and
            gives no ``log_id``).
    """

    method: str = "osumem"
    params: Mapping[str, Any] | None = None
    seed: int = 0
    budget: int = 256
    max_text_chars: int = 100_000
    boilerplate: frozenset[str] = DEFAULT_BOILERPLATE
    prefix_namespace: bool = False
    replay_batches: bool = True
    ann_min_steps: int = MEMORY_ANN_MIN_STEPS
    on_duplicate: str = "skip"

    parameter_constraints: ClassVar[Constraints] = {
        "on_duplicate": Options(ON_DUPLICATE),
        "budget": Interval(int, 1, None),  # checked first, as a BudgetError
        "max_text_chars": Interval(int, 1, None),
        "ann_min_steps": Interval(int, 1, None),
    }

    def __post_init__(self) -> None:
        from osumem.retrieve.registry import check_deployable, make_config

        check_budget(self.budget)  # a BudgetError, as every budget check raises
        super().__post_init__()
        make_config(self.method, self.params)  # unknown method / parameter fails here
        check_deployable(self.method)  # an oracle needs ground truth a memory lacks


class Memory:
    """An incremental, optionally persistent trajectory memory. Use :meth:`open`.

    Several processes may write one store (each add is one ``BEGIN IMMEDIATE``
    transaction); before answering, a memory catches up with what other writers
    committed (SQLite's ``data_version``), so its positions and answers always equal
    a fresh open's. One ``Memory`` object is not meant to be used by two threads at
    once: serialise calls (the SQLite connection itself is thread-safe).
    """

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
        self._data: dict[str, NamespaceBuffer] = {}
        self._counts: dict[str, tuple[int, int]] = {}  # namespace -> (steps, user steps)
        self._retrievers: dict[str, tuple[Retriever, int]] = {}
        self._snapshots: dict[str, int] = {}  # namespace -> steps its stored snapshot covers
        self._causal_cache: tuple[tuple[str, int, int], Retriever] | None = None
        self._version = store.data_version()

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
        read_only: bool = False,
        timeout: float = 30.0,
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
            read_only: open for queries only (chosen automatically on a read-only
                file, folder or medium); every add then raises ``StoreReadOnlyError``.
            timeout: seconds to wait for another writer's lock before
                ``StoreBusyError``.
            settings: the other :class:`MemoryConfig` fields.

        Raises:
            StoreError: typed by cause (``StoreBusyError``, ``StoreReadOnlyError``,
                ``StoreIOError``, ``StoreCorruptError``, ``ForeignStoreError``,
                ``NewerSchemaError``, ``IncompatibleStoreError`` for another encoder).
            InvalidInputError: the encoder cannot be loaded (unknown name, missing
                extra). A failed open leaves no new file behind.
        """
        config = MemoryConfig(method=method, params=params, seed=seed, budget=budget, **settings)
        encoder = as_encoder(encoder)  # an encoder of an earlier release: model_id
        if encoder is not None and not isinstance(encoder, Encoder | str | Path):
            raise InvalidInputError(
                f"encoder: expected an Encoder, a name or a path, got {type(encoder).__name__}"
            )
        store = MemoryStore(path, read_only=read_only, timeout=timeout)
        try:
            enc = resolve_encoder(encoder)
            recorded = store.encoder_id
            known = bool(recorded) and not recorded.startswith(EXTERNAL_PREFIX)
            if enc is not None and known and (enc.encoder_id != recorded or enc.dim != store.dim):
                raise IncompatibleStoreError(
                    f"memory store {path}: made with encoder {recorded!r} (dim "
                    f"{store.dim}); opened with {enc.encoder_id!r} (dim {enc.dim})"
                )
            spec = None if enc is not None else (recorded or "sbert")
            if spec is not None:
                check_available(spec)  # a missing extra fails here, not at the first add
            memory = cls(
                store,
                enc,
                config,
                encoder_spec=spec,
                owns_encoder=enc is not None and not isinstance(encoder, Encoder),
            )
        except BaseException:
            created = store.created
            store.close()
            if created and store.path is not None:
                remove_store_files(store.path)
            raise
        return memory

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
                f"{what}: this memory has no encoder (store encoder {self.store.encoder_id!r}); "
                "pass vectors, or open it with encoder=..."
            )
        return enc

    # --- keeping up with other writers ---------------------------------------------

    def _refresh(self) -> None:
        """Bring the cached namespaces up to what other connections committed: new
        steps are appended to the cached view (the retriever then takes them as an
        ``update`` along the stored batch ends); anything else is reloaded."""
        version = self.store.data_version()
        if version == self._version:
            return
        self._version = version
        self._causal_cache = None
        for ns in list(self._data):
            buf = self._data[ns]
            n = self.store.n_steps(ns)
            if n == buf.n:
                continue
            if n < buf.n:
                self._forget(ns)
                continue
            buf.extend(self.store.load(ns, start=buf.n))

    def _forget(self, namespace: str | None = None) -> None:
        """Drop cached views and retrievers (of one namespace, or all)."""
        if namespace is None:
            self._data.clear()
            self._counts.clear()
            self._retrievers.clear()
            self._snapshots.clear()
        else:
            self._data.pop(namespace, None)
            self._counts.pop(namespace, None)
            self._retrievers.pop(namespace, None)
            self._snapshots.pop(namespace, None)
        self._causal_cache = None

    @contextmanager
    def transaction(self) -> Iterator[Memory]:
        """Group several adds into one transaction: all are stored, or none (a failure
        inside rolls every add of the block back).

        >>> with mem.transaction():                                   # doctest: +SKIP
        ...     for log in logs:
        ...         mem.add_messages(log, namespace="runs")
        """
        outer = not self.store.in_transaction
        try:
            with self.store.transaction():
                yield self
        except BaseException:
            if outer:
                self._forget()
            raise

    # --- reading --------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        """Namespaces holding steps (or held messages), sorted."""
        return self.store.namespaces()

    def n_steps(self, namespace: str = DEFAULT_NAMESPACE) -> int:
        """Number of steps in ``namespace``."""
        check_namespace(namespace)
        return self.store.n_steps(namespace)

    def view(self, namespace: str = DEFAULT_NAMESPACE) -> MemoryView:
        """The columnar view of ``namespace`` (what the retriever reads)."""
        check_namespace(namespace)
        self._refresh()
        return self._namespace(namespace).view

    def retriever(self, namespace: str = DEFAULT_NAMESPACE) -> Retriever | None:
        """The namespace's retriever, brought up to date (``None`` while it is empty)."""
        check_namespace(namespace)
        self._refresh()
        return self._sync(namespace)

    def held(self, namespace: str = DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
        """The messages of ``namespace`` held back by :meth:`add_messages` (an
        assistant tool call still waiting for its response, with any responses that
        came already); they become steps with the next add."""
        check_namespace(namespace)
        return self.store.pending(namespace)

    def discard_held(self, namespace: str = DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
        """Delete the held messages of ``namespace`` (one transaction) and return
        them; the calls they hold never become steps. Works on damaged entries too."""
        check_namespace(namespace)
        return self.store.discard_pending(namespace)

    def delete_namespace(self, namespace: str = DEFAULT_NAMESPACE) -> int:
        """Delete every step and held message of ``namespace`` (one transaction) and
        return the number of steps deleted (0 for an unknown namespace). Other
        ``Memory`` objects on the store drop the namespace at their next call."""
        check_namespace(namespace)
        n = self.store.delete_namespace(namespace)
        self._forget(namespace)
        return n

    def _namespace(self, namespace: str) -> NamespaceData:
        buf = self._data.get(namespace)
        if buf is None:
            buf = NamespaceBuffer(self.store.load(namespace))
            self._data[namespace] = buf
        return buf.data()

    def _users(self, namespace: str) -> int:
        """User steps stored in ``namespace`` (the subgoal segment counter), kept
        incrementally: only steps added since the last count are looked at."""
        n = self.store.n_steps(namespace)
        buf = self._data.get(namespace)
        if buf is not None and buf.n == n:
            return buf.users
        seen, users = self._counts.get(namespace, (0, 0))
        if seen > n:
            seen, users = 0, 0
        if seen < n:
            users += self.store.count_role(namespace, "user", start=seen)
        self._counts[namespace] = (n, users)
        return users

    def _snapshot(self, namespace: str, source: str) -> HeldSnapshot:
        """What an add from ``source`` continues: its held messages, the namespace's
        user-step count, and the other sources' held messages with their sources
        (:mod:`osumem.memory.held`)."""
        held, sources = self.store.pending_with_sources(namespace)
        mine, others, of = split_held(held, sources, source)
        return mine, self._users(namespace), others, of

    def _sync(self, namespace: str) -> Retriever | None:
        data = self._namespace(namespace)
        if data.view.n == 0:
            return None
        retriever, fitted = self._retrievers.get(namespace, (None, 0))
        if retriever is None:
            retriever, fitted = self._restore(namespace, data)
        retriever, fitted = self._replay(namespace, data, data.view.n, retriever, fitted)
        self._retrievers[namespace] = (retriever, fitted)
        if not self.store.in_transaction:
            self._save_snapshot(namespace, force=False)
        return retriever

    def _snapshots_on(self) -> bool:
        """Snapshots are kept for a file store replayed along its add batches."""
        return self.store.path is not None and self.config.replay_batches

    def _new_retriever(self) -> Retriever:
        """A fresh retriever of the configured method, seed and ANN threshold."""
        from osumem.retrieve.registry import create

        retriever = create(self.config.method, self.config.params, seed=self.config.seed)
        retriever.ann_min_steps = self.config.ann_min_steps
        return retriever

    def _restore(self, namespace: str, data: NamespaceData) -> tuple[Retriever | None, int]:
        """A retriever loaded from the namespace's stored snapshot and the steps it
        covers, or ``(None, 0)`` when there is none that matches (see
        :mod:`osumem.memory.snapshot`)."""
        self._snapshots[namespace] = 0
        if not self._snapshots_on():
            return None, 0
        row = self.store.snapshot(namespace)
        if row is None or not 0 < row.steps <= data.view.n:
            return None, 0
        retriever = self._new_retriever()
        n = row.steps
        view = data.view.prefix(n) if n == data.view.n else self._data[namespace].prefix_view(n)
        if not snapshot.restore(retriever, row, data, view):
            return None, 0
        self._snapshots[namespace] = n
        return retriever, n

    def _save_snapshot(self, namespace: str, *, force: bool) -> None:
        """Store a snapshot of the namespace's retriever when one is due (``force``:
        whenever it covers more than the stored one); a busy or read-only store skips
        it."""
        if not self._snapshots_on() or self.store.read_only:
            return
        retriever, fitted = self._retrievers.get(namespace, (None, 0))
        buf = self._data.get(namespace)
        if retriever is None or buf is None or buf.n < fitted or not snapshot.supports(retriever):
            return
        last = self._snapshots.get(namespace, 0)
        if fitted <= last or not (force or snapshot.due(fitted, last)):
            return
        row = snapshot.encode(retriever, buf.data(), fitted)
        if self.store.save_snapshot(namespace, row):
            self._snapshots[namespace] = fitted

    def _replay(
        self,
        namespace: str,
        data: NamespaceData,
        upto: int,
        retriever: Retriever | None = None,
        fitted: int = 0,
    ) -> tuple[Retriever, int]:
        """Bring ``retriever`` (a new one when ``None``) from ``fitted`` steps up to
        ``upto`` along the stored add boundaries, as the writing session did."""
        if retriever is None:
            retriever = self._new_retriever()
        ends = data.batch_ends if self.config.replay_batches or fitted else (data.view.n,)
        if type(retriever).update is Retriever.update:
            ends = ()  # its update is a fresh fit: one fit of the prefix is the same state
        buf = self._data[namespace]
        for end in [*(e for e in ends if fitted < e < upto), upto]:
            if end <= fitted:
                continue
            # intermediate batches go through copy-free prefix views; the last one is
            # a plain view, which the retriever keeps
            v = data.view.prefix(end) if end == upto else buf.prefix_view(end)
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
        retriever, _ = self._replay(namespace, data, before)
        self._causal_cache = (key, retriever)
        return retriever

    def _query_vector(self, query: Any) -> tuple[NDArray[np.float32], str | None]:
        """Validate ``query`` (a non-empty text or a finite vector of the store's
        dimension) and return it as a vector (and its text)."""
        if isinstance(query, str):
            if not query.strip():
                raise InvalidInputError("query: empty text; give words to search for")
            if len(query) > self.config.max_text_chars:
                raise OversizedInputError(
                    f"query: {len(query)} characters; max_text_chars is "
                    f"{self.config.max_text_chars}"
                )
            try:
                query.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidInputError(
                    f"query: not valid Unicode text (position {exc.start})"
                ) from None
            return self._need_encoder("retrieve(query text)").encode([query])[0], query
        if isinstance(query, bytes | bytearray | Mapping | set | frozenset) or not isinstance(
            query, np.ndarray | Sequence
        ):
            raise InvalidInputError(
                f"query: expected a text or a vector of numbers, got {type(query).__name__}"
            )
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                q = np.asarray(query, dtype=np.float32)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidInputError(f"query: not a vector of numbers ({exc})") from None
        dim = self.store.dim
        if q.ndim != 1 or q.shape[0] == 0:
            raise DimensionError(f"query: expected a non-empty 1-d vector, got shape {q.shape}")
        if dim and q.shape[0] != dim:
            raise DimensionError(
                f"query: vector has dimension {q.shape[0]}, the memory store has {dim} "
                f"(encoder {self.store.encoder_id!r})"
            )
        if not np.isfinite(q).all():
            raise NonFiniteError("query: the vector holds NaN or infinite values")
        return q, None

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
            query: a non-empty text (encoded with the memory's encoder) or a finite
                query vector; anything else is an ``InvalidInputError``.
            budget: token budget (default: the memory's ``budget``).
            namespace: which episode to search.
            before: only steps at positions ``< before`` (causality); ``None``: all.
                The answer is what the memory would have given right after step
                ``before - 1`` was added: the structure is rebuilt from those steps
                alone, so later steps cannot influence it.
        """
        if isinstance(budget, int) and not isinstance(budget, bool) and abs(budget) > 2**62:
            raise BudgetError(f"budget must be a positive integer, got {_show(budget)}")
        b = check_budget(self.config.budget if budget is None else budget)
        check_namespace(namespace)
        if before is not None and (
            isinstance(before, bool) or not isinstance(before, int | np.integer)
        ):
            raise InvalidInputError(f"before: expected an integer position, got {_show(before)}")
        if before is not None and before < 0:
            raise InvalidInputError(f"before: expected a position >= 0, got {before}")
        before = None if before is None else int(before)
        q, text = self._query_vector(query)
        self._refresh()
        retriever = self._sync(namespace)
        if retriever is None or before == 0:
            empty = Explanation(self.config.method, b, 0)
            return Retrieved(namespace, self.config.method, b, (), text, explanation=empty)
        data = self._namespace(namespace)
        if before is not None and before < data.view.n:
            retriever = self._causal(namespace, before)
        sel = retriever.retrieve(q, b, text=text)
        handles = osu_handles(retriever, sel.positions)
        v = data.view
        steps = tuple(
            RetrievedStep(
                position=int(p),
                step_id=int(data.step_ids[p]),
                namespace=namespace,
                source=str(v.sources[p]),
                role=str(v.roles[p]),
                text=str(v.texts[p]),
                tool_action=str(v.tool_actions[p]),
                cost=int(v.costs[p]),
                osus=handles[rank],
                rank=rank,
            )
            for rank, p in enumerate(sel.positions.tolist())
        )
        why = explainer(retriever, q, text, b, sel.positions, self.config.method)
        return Retrieved(namespace, self.config.method, b, steps, text, _explainer=why)

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
        the step texts are encoded. A step with an empty ``source`` gets
        ``namespace`` as its source. Nothing is written if any step is invalid.
        """
        check_namespace(namespace)
        if isinstance(steps, Step) or not isinstance(steps, Sequence):
            raise InvalidInputError("steps: expected a list of Step records")
        rows = [
            step_row(s, f"steps[{i}]", namespace, self.config.max_text_chars)
            for i, s in enumerate(steps)
        ]
        emb = self._embed(rows, embeddings)
        with self.store.transaction():
            self._refresh()
            ids = self._write(namespace, rows, emb, embeddings is not None, pending=None)
        self._extend_cache(namespace, rows, emb, ids)
        return ids

    def add_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        source: str | None = None,
        prefix_namespace: bool | None = None,
        hold_open_calls: bool = True,
        on_duplicate: str | None = None,
        log_id: str | None = None,
        format: str = "auto",
    ) -> list[int]:
        """Append an agent's chat messages to ``namespace``; return the new step ids.

        Messages become steps as :func:`osumem.ingest.openai_chat.read_messages`
        defines (one per user message, assistant text and tool call; a tool response
        is its call's observation). The messages may come a few at a time: when the
        last assistant message's tool calls have no response yet and
        ``hold_open_calls`` is set, that message is held (stored, not yet a step) and
        joins the next add, so its step carries the response (see :meth:`held` and
        :meth:`discard_held`). Subgoal segments and tool-call matching continue across
        adds. Everything, the held messages included, is validated before anything
        is written, so an accepted add never makes a later valid add fail.

        Args:
            source: the steps' source name (default: ``namespace``); it labels subgoals
                and, with ``prefix_namespace``, prefixes entities and signatures.
            prefix_namespace: default: the memory's ``prefix_namespace`` setting.
            on_duplicate: what to do when these messages (same content, or the same
                ``log_id``) were added to the namespace before: ``"skip"`` (add
                nothing, return ``[]``, so a re-run or a retried add stores nothing
                twice), ``"append"`` (add them again) or ``"error"``
                (``DuplicateInputError``); ``None``: the memory's ``on_duplicate``
                setting (``"skip"`` unless opened with another). Adds made with ``"append"`` and no
                ``log_id`` are not remembered for this. An agent that may send the
                same message twice on purpose passes a ``log_id`` per message (its
                index or id in the run) or ``"append"``.
            log_id: a caller-given identity of the messages (instead of their content).
            format: the messages' shape: ``"openai"`` (``tool_calls``),
                ``"openai-legacy"`` (``function_call`` / ``role: "function"``),
                ``"anthropic"`` (``tool_use`` / ``tool_result`` blocks) or ``"auto"``
                (default: read from the messages); see
                :func:`osumem.ingest.normalize_messages`. Messages that make no step
                (a system prompt, an empty assistant message) are not stored.
        """
        check_namespace(namespace)
        if on_duplicate is None:
            on_duplicate = self.config.on_duplicate
        if on_duplicate not in ON_DUPLICATE:
            raise ConfigError(
                f"on_duplicate: expected one of {ON_DUPLICATE}, got {_show(on_duplicate)}"
            )
        if log_id is not None:
            check_namespace(log_id, "log_id")
        if source is not None:
            check_namespace(source, "source")
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
            raise InvalidInputError("messages: expected a list of message dicts")
        clean = _canonical(check_messages(messages, self.config.max_text_chars), format)
        digest = log_digest(clean, log_id)
        src = namespace if source is None else source
        prefix = self.config.prefix_namespace if prefix_namespace is None else prefix_namespace
        self._refresh()
        if on_duplicate != "append" and self._is_duplicate(namespace, digest, on_duplicate):
            return []
        snapshot = self._snapshot(namespace, src)
        plan = self._plan(clean, snapshot, namespace, src, prefix, hold_open_calls)
        with self.store.transaction():
            self._refresh()
            if on_duplicate != "append" and self._is_duplicate(namespace, digest, on_duplicate):
                return []
            now = self._snapshot(namespace, src)
            if now != snapshot:  # another writer moved the namespace meanwhile
                plan = self._plan(clean, now, namespace, src, prefix, hold_open_calls)
            rows, emb, new_held = plan
            # an agent's streaming adds (append, no id) are not logs: no digest kept
            keep = on_duplicate != "append" or log_id is not None
            others, of = now[2], now[3]  # other sources' held messages stay held
            ids = self._write(
                namespace,
                rows,
                emb,
                False,
                pending=[*others, *new_held],
                pending_sources=[*of, *([src] * len(new_held))],
                digest=digest if keep else None,
            )
        self._extend_cache(namespace, rows, emb, ids)
        return ids

    def contains_log(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        log_id: str | None = None,
    ) -> bool:
        """Whether this log (same content, or the same ``log_id``) was added to
        ``namespace`` as a log (with ``on_duplicate`` skip/error or a ``log_id``)."""
        check_namespace(namespace)
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
            raise InvalidInputError("messages: expected a list of message dicts")
        clean = _canonical(check_messages(messages, self.config.max_text_chars), "auto")
        return self.store.has_digest(namespace, log_digest(clean, log_id))

    def _is_duplicate(self, namespace: str, digest: str, on_duplicate: str) -> bool:
        if not self.store.has_digest(namespace, digest):
            return False
        if on_duplicate == "error":
            raise DuplicateInputError(
                f"namespace {namespace!r}: this log was added before ({digest[:19]}…); "
                "pass on_duplicate='append' to add it again"
            )
        return True

    def _plan(
        self,
        messages: list[dict[str, Any]],
        snapshot: HeldSnapshot,
        namespace: str,
        source: str,
        prefix: bool,
        hold_open_calls: bool,
    ) -> tuple[list[StepRow], NDArray[np.float32], list[dict[str, Any]]]:
        """Validate held + new messages and turn them into rows, embeddings and the
        messages to hold (everything an add writes, computed before the write)."""
        from osumem.ingest.openai_chat import read_messages

        held, users_before = snapshot[0], snapshot[1]
        check_answers(messages, held, snapshot[2], snapshot[3], source)
        combined = [*held, *messages]
        where = "messages" if not held else f"held+messages (the first {len(held)} held)"
        read = functools.partial(
            read_messages,
            source=source,
            boilerplate=self.config.boilerplate,
            prefix_namespace=prefix,
            where=where,
        )
        limit = self.config.max_text_chars
        every = continue_segments(read(combined), users_before, source)  # validates all
        for i, s in enumerate(every):  # held calls included: nothing is checked later
            if len(s.text) > limit:
                raise OversizedInputError(
                    f"{where}: step {i} ({s.role}) text has {len(s.text)} characters; "
                    f"max_text_chars is {limit}"
                )
            step_row(s, f"{where}: step {i}", namespace, limit)
        cut = open_call_start(combined) if hold_open_calls else len(combined)
        new_held = combined[cut:]
        if new_held:
            read(new_held)  # a held tail must be readable on its own at the next add
        steps = continue_segments(read(combined[:cut]), users_before, source)
        enc = self._need_encoder("add_messages") if steps else None
        if enc is not None:
            costs = enc.count_tokens([s.text for s in steps])
            steps = [replace(s, cost=int(c)) for s, c in zip(steps, costs, strict=True)]
        rows = [step_row(s, f"{where}: step {i}", namespace, limit) for i, s in enumerate(steps)]
        return rows, self._embed(rows, None), new_held

    def _embed(self, rows: list[StepRow], embeddings: NDArray[Any] | None) -> NDArray[np.float32]:
        """Validated, L2-normalised embeddings of ``rows`` (given or encoded)."""
        store_dim = self.store.dim
        if embeddings is None:
            if rows:
                enc = self._need_encoder("add (steps without embeddings)")
                emb = enc.encode([r.text for r in rows])
                where = f"encoder {enc.encoder_id}"
            else:
                emb = np.zeros((0, store_dim), dtype=np.float32)
                where = "embeddings"
        else:
            try:
                emb = np.asarray(embeddings, dtype=np.float32)
            except (TypeError, ValueError, OverflowError) as exc:
                raise InvalidInputError(f"embeddings: not a matrix of numbers ({exc})") from None
            where = "embeddings"
        if emb.ndim != 2 or emb.shape[0] != len(rows):
            raise DimensionError(f"{where}: expected shape ({len(rows)}, d), got {emb.shape}")
        if rows and store_dim and emb.shape[1] != store_dim:
            raise DimensionError(
                f"{where}: vectors of dimension {emb.shape[1]}, the memory store holds "
                f"dimension {store_dim} (encoder {self.store.encoder_id!r})"
            )
        if rows and emb.shape[1] == 0:
            raise DimensionError(f"{where}: vectors of dimension 0")
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
                f"{own.encoder_id!r} has dimension {own.dim}"
            )
        return l2_normalise(emb, what=where) if rows else emb

    def _write(
        self,
        namespace: str,
        rows: list[StepRow],
        emb: NDArray[np.float32],
        external: bool,
        *,
        pending: Sequence[Mapping[str, Any]] | None,
        pending_sources: Sequence[str | None] | None = None,
        digest: str | None = None,
    ) -> list[int]:
        """Store validated rows (inside the caller's transaction)."""
        if rows and self.store.dim and emb.shape[1] != self.store.dim:
            raise DimensionError(
                f"embeddings: vectors of dimension {emb.shape[1]}, the memory store holds "
                f"dimension {self.store.dim} (encoder {self.store.encoder_id!r})"
            )
        encoder_id = self._encoder_id_for(external, emb.shape[1])
        users = self._users(namespace) if rows else 0
        ids = self.store.append(
            namespace,
            rows,
            emb,
            encoder_id=encoder_id,
            pending=pending,
            pending_sources=pending_sources,
            digest=digest,
        )
        if rows:
            n = self.store.n_steps(namespace)
            self._counts[namespace] = (n, users + sum(r.role == "user" for r in rows))
        if encoder_id.startswith(EXTERNAL_PREFIX) and self._encoder is None:
            self._encoder_spec = None  # a vectors-only store: never guess an encoder
        return ids

    def _encoder_id_for(self, external: bool, dim: int) -> str:
        recorded = self.store.encoder_id
        if recorded:
            return recorded
        enc = self._encoder if external else self.encoder
        return enc.encoder_id if enc is not None else f"{EXTERNAL_PREFIX}:d{dim}"

    def _extend_cache(
        self, namespace: str, rows: list[StepRow], emb: NDArray[np.float32], ids: list[int]
    ) -> None:
        """Append the committed rows to the cached view (the same bytes the store now
        holds, so the live view equals a reloaded one)."""
        buf = self._data.get(namespace)
        if buf is None or not rows:
            return
        if self.store.n_steps(namespace) != buf.n + len(rows):
            self._forget(namespace)  # someone else wrote in between: reload lazily
            return

        def obj(values: Iterable[Any]) -> NDArray[Any]:
            new = np.empty(len(rows), dtype=object)
            new[:] = list(values)
            return new

        delta = NamespaceData(
            view=MemoryView(
                embeddings=emb.astype(np.float32, copy=False),
                costs=np.array([r.cost for r in rows], dtype=np.int64),
                tool_actions=obj(r.tool_action for r in rows),
                tool_signatures=obj(r.tool_signature for r in rows),
                entities=tuple(frozenset(r.entities) for r in rows),
                subgoals=obj(r.subgoal for r in rows),
                sources=obj(r.source for r in rows),
                roles=obj(r.role for r in rows),
                texts=obj(r.text for r in rows),
            ),
            step_ids=np.asarray(ids, dtype=np.int64),
            arguments=tuple(r.arguments_json for r in rows),
            batch_ends=(buf.n + len(rows),),
        )
        buf.extend(delta)

    # --- lifecycle ------------------------------------------------------------------

    def check(self) -> None:
        """Run the store's full integrity check; raises only ``StoreError`` subclasses
        (``StoreCorruptError``, alias ``StoreIntegrityError``, listing every problem)."""
        self.store.check()

    def close(self) -> None:
        """Checkpoint and close the store and, if this memory opened it, the encoder's
        cache. Before closing, the retrievers built in this session are stored as
        snapshots (when they cover more than the stored ones), so the next open need
        not replay every add."""
        if self.store.is_open and not self.store.in_transaction:
            for namespace in list(self._retrievers):
                # a snapshot is a cache: never fail a close for it
                with suppress(StoreError, ValueError, OSError, MemoryError):
                    self._save_snapshot(namespace, force=True)
        self.store.close()
        close = getattr(self._encoder, "close", None)
        if self._owns_encoder and callable(close):
            close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _canonical(messages: list[dict[str, Any]], format: str) -> list[dict[str, Any]]:
    """The messages in canonical OpenAI ``tool_calls`` shape (validated input)."""
    from osumem.ingest import normalize_messages

    return [dict(m) for m in normalize_messages(messages, format).messages]
