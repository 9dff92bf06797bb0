"""The agent-facing memory: incremental, persistent, namespaced.

See :class:`Memory` (``Memory.open(path, encoder=..., method="osumem")``),
:class:`Retrieved` (``.steps``, ``.render()``, ``.explain()``), the store interface
:class:`MemoryStore` (:mod:`osumem.memory.backends`; SQLite is
:class:`~osumem.memory.backends.sqlite.SQLiteStore`) and :func:`open_store`;
:mod:`osumem.memory.export` exports a memory to JSON Lines and imports it back.
"""

from osumem.errors import (
    ForeignStoreError,
    IncompatibleStoreError,
    NewerSchemaError,
    StaleResultError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
    StoreReadOnlyError,
)
from osumem.memory.api import DEFAULT_NAMESPACE, Memory, MemoryConfig, OversizedInputError
from osumem.memory.backends import SCHEMA_VERSION, MemoryStore, open_store
from osumem.memory.explain import Explanation
from osumem.memory.filters import StepFilter
from osumem.memory.retrieved import OSUHandle, Retrieved, RetrievedStep, StoredStep

#: The error :meth:`MemoryStore.check` raises (the corrupt-store error under its old name).
StoreIntegrityError = StoreCorruptError

__all__ = [
    "DEFAULT_NAMESPACE",
    "SCHEMA_VERSION",
    "Explanation",
    "ForeignStoreError",
    "IncompatibleStoreError",
    "Memory",
    "MemoryConfig",
    "MemoryStore",
    "NewerSchemaError",
    "OSUHandle",
    "OversizedInputError",
    "Retrieved",
    "RetrievedStep",
    "StaleResultError",
    "StepFilter",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreError",
    "StoreIOError",
    "StoreIntegrityError",
    "StoreReadOnlyError",
    "StoredStep",
    "open_store",
]
