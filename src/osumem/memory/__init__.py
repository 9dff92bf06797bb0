"""The agent-facing memory: incremental, persistent (SQLite), namespaced.

See :class:`Memory` (``Memory.open(path, encoder=..., method="osumem")``),
:class:`Retrieved` (``.steps``, ``.render()``, ``.explain()``) and :class:`MemoryStore`;
:mod:`osumem.memory.export` exports a memory to JSON Lines and imports it back.
"""

from osumem.memory.api import DEFAULT_NAMESPACE, Memory, MemoryConfig, OversizedInputError
from osumem.memory.explain import Explanation, StaleResultError
from osumem.memory.retrieved import OSUHandle, Retrieved, RetrievedStep
from osumem.memory.store import (
    SCHEMA_VERSION,
    ForeignStoreError,
    IncompatibleStoreError,
    MemoryStore,
    NewerSchemaError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreIntegrityError,
    StoreIOError,
    StoreReadOnlyError,
)

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
    "StoreBusyError",
    "StoreCorruptError",
    "StoreError",
    "StoreIOError",
    "StoreIntegrityError",
    "StoreReadOnlyError",
]
