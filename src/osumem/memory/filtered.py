"""Filtered retrieval: the retrievers built over the steps that pass a filter.

A filter is applied before anything is ranked or packed: the answer is the one a
memory holding only the passing steps (added in the same batches, with their stored
annotations and embeddings) gives, so a filtered retrieval never returns a failing
step, fills its budget from the passing ones, and no failing step shapes its units
(a filter on a user id keeps other users' steps out of the structure, not just out
of the answer). This is the semantics of ``before=`` (a causal query) made general.

Building that retriever costs what building the namespace's costs for that many
steps; the last :data:`MAX_FILTERED` of them are kept (per memory, keyed by method,
namespace state and the passing steps), so an agent that asks with the same filter
(a user id, a role) builds it once per write.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.memory.retrievers import RetrieverCache
from osumem.memory.rows import NamespaceData, subset
from osumem.retrieve.base import Retriever

#: How many filtered retrievers a memory keeps built.
MAX_FILTERED = 4


class FilteredRetrievers:
    """The retrievers of filtered retrievals, the most recently used kept (safe to call
    from several threads: a miss builds outside the lock)."""

    def __init__(self, size: int = MAX_FILTERED) -> None:
        self.size = size
        self._kept: OrderedDict[tuple[Any, ...], tuple[NamespaceData, Retriever, NamespaceData]]
        self._kept = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self,
        cache: RetrieverCache,
        namespace: str,
        data: NamespaceData,
        keep: NDArray[np.int64],
    ) -> tuple[Retriever, NamespaceData]:
        """The retriever over the steps of ``data`` at positions ``keep`` (sorted), built
        with ``cache``'s method, and those steps as a namespace of their own."""
        digest = hashlib.sha256(np.ascontiguousarray(keep, dtype=np.int64).data).hexdigest()
        key = (id(cache), cache.method, namespace, id(data), data.view.n, digest)
        with self._lock:
            hit = self._kept.get(key)
            if hit is not None and hit[0] is data:
                self._kept.move_to_end(key)
                return hit[1], hit[2]
        part = subset(data, keep)
        retriever = cache.built_from(part)
        with self._lock:
            self._kept[key] = (data, retriever, part)
            self._kept.move_to_end(key)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        return retriever, part

    def forget(self) -> None:
        """Drop every kept retriever."""
        with self._lock:
            self._kept.clear()
