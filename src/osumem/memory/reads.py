"""Reading a memory: its namespaces, views, held messages, stored steps and the
retrieve pipeline (query vector, filter, causal limit, the retriever's
selection); a base of :class:`~osumem.memory.Memory`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import (
    InvalidInputError,
)
from osumem.memory.blas import limited
from osumem.memory.config import (
    DEFAULT_NAMESPACE,
)
from osumem.memory.core import MemoryCore
from osumem.memory.explain import Explanation
from osumem.memory.filters import compile_filter
from osumem.memory.planner import canonical
from osumem.memory.query import query_vector
from osumem.memory.retrieved import Retrieved, StoredStep, retrieved_from
from osumem.memory.validate import (
    _show,
    check_messages,
    check_namespace,
    log_digest,
)
from osumem.retrieve.base import Retriever
from osumem.retrieve.budget import validated_budget
from osumem.types import MemoryView


class MemoryReads(MemoryCore):
    """The reading methods of :class:`~osumem.memory.Memory`."""

    def namespaces(self) -> list[str]:
        """Namespaces holding steps (or held messages), sorted."""
        return self.store.namespaces()

    def n_steps(self, namespace: str = DEFAULT_NAMESPACE) -> int:
        """Number of steps in ``namespace``."""
        check_namespace(namespace)
        return self.store.n_steps(namespace)

    @limited
    def view(self, namespace: str = DEFAULT_NAMESPACE) -> MemoryView:
        """The columnar view of ``namespace`` (what the retriever reads)."""
        check_namespace(namespace)
        self._refresh()
        return self._views.data(namespace).view

    @limited
    def retriever(self, namespace: str = DEFAULT_NAMESPACE) -> Retriever | None:
        """The namespace's retriever, brought up to date (``None`` while it is empty)."""
        check_namespace(namespace)
        self._refresh()
        return self._retrievers.sync(namespace)

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
        self._views.forget(namespace)
        self._filtered.forget()
        return n

    @limited
    def retrieve(
        self,
        query: str | NDArray[Any] | Sequence[float],
        budget: int | None = None,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        method: str | None = None,
        before: int | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> Retrieved:
        """Select past steps of ``namespace`` for ``query`` under ``budget`` tokens.

        Args:
            query: a non-empty text (encoded with the memory's encoder) or a finite
                query vector; anything else is an ``InvalidInputError``.
            budget: token budget (default: the memory's ``budget``).
            namespace: which episode to search.
            method: a registered retrieval method to answer with instead of the
                memory's own (default parameters, built on first use over the same
                steps); ``None``: the memory's method.
            before: only steps at positions ``< before`` (causality); ``None``: all.
                The answer is what the memory would have given right after step
                ``before - 1`` was added: the structure is rebuilt from those steps
                alone, so later steps cannot influence it.
            filter: only steps that pass this filter (see :mod:`osumem.memory.filters`:
                equality and ranges on metadata, ``role``, ``tool``, ``source``,
                ``time``), applied before anything is ranked or packed: the answer is
                the one a memory holding only the passing steps gives
                (:mod:`osumem.memory.filtered`), so the budget fills from them.

        Raises:
            InvalidFilterError: an unknown operator, a value of the wrong type, a
                metadata key no step of the namespace holds (the clause named).
        """
        with validated_budget(self.config.budget if budget is None else budget) as b:
            return self._retrieve(query, b, namespace, method, before, filter)

    def _retrieve(
        self,
        query: Any,
        b: int,
        namespace: str,
        method: str | None,
        before: int | None,
        filter: Mapping[str, Any] | None = None,
    ) -> Retrieved:
        check_namespace(namespace)
        flt = compile_filter(filter)
        cache = self._methods.cache(method)
        if before is not None and (
            isinstance(before, bool) or not isinstance(before, int | np.integer)
        ):
            raise InvalidInputError(f"before: expected an integer position, got {_show(before)}")
        if before is not None and before < 0:
            raise InvalidInputError(f"before: expected a position >= 0, got {before}")
        before = None if before is None else int(before)
        q, text = query_vector(
            query,
            max_text_chars=self.config.max_text_chars,
            dim=self.store.dim,
            encoder_id=self.store.encoder_id,
            encode=lambda t: self._need_encoder("retrieve(query text)").encode([t])[0],
        )
        self._refresh()
        retriever = cache.sync(namespace)
        if retriever is None or before == 0:
            empty = Explanation(cache.method, b, 0)
            return Retrieved(namespace, cache.method, b, (), text, explanation=empty)
        data = self._views.data(namespace)
        if flt is not None:
            mask = flt.mask(data, namespace)
            if before is not None:
                mask[before:] = False
            keep = np.flatnonzero(mask).astype(np.int64)
            if keep.size == 0:
                empty = Explanation(cache.method, b, 0)
                return Retrieved(namespace, cache.method, b, (), text, explanation=empty)
            if keep.size < data.view.n:
                sub, part = self._filtered.get(cache, namespace, data, keep)
                picked = sub.retrieve(q, b, text=text).positions
                return retrieved_from(
                    sub,
                    q,
                    picked,
                    part,
                    namespace=namespace,
                    method=cache.method,
                    budget=b,
                    text=text,
                    mapping=keep,
                )
        if before is not None and before < data.view.n:
            retriever = cache.causal(namespace, before)
        answering = cache.method_of(retriever)  # INTERIM while a rebuild runs
        sel = retriever.retrieve(q, b, text=text)
        return retrieved_from(
            retriever,
            q,
            sel.positions,
            data,
            namespace=namespace,
            method=answering,
            budget=b,
            text=text,
        )

    def steps(
        self,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        positions: int | Sequence[int] | None = None,
        ids: int | Sequence[int] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredStep]:
        """The stored steps of ``namespace`` (with their metadata and times): those at
        ``positions``, or with ``ids`` (in the order given), or all in position order;
        ``filter`` keeps only those that pass (as ``retrieve(filter=...)``).

        Raises:
            StepNotFoundError: a named position or id the namespace does not hold.
        """
        check_namespace(namespace)
        self._refresh()
        return self._editor.steps(namespace, filter=filter, positions=positions, ids=ids)

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
        clean = canonical(check_messages(messages, self.config.max_text_chars), "auto")
        return self.store.has_digest(namespace, log_digest(clean, log_id))
