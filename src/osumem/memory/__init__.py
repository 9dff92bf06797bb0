"""The agent-facing memory: incremental, persistent (SQLite), namespaced.

See :class:`Memory` (``Memory.open(path, encoder=..., method="osumem")``),
:class:`Retrieved` (``.steps``, ``.render()``) and :class:`MemoryStore`.
"""

from osumem.memory.api import DEFAULT_NAMESPACE, Memory, MemoryConfig, OversizedInputError
from osumem.memory.retrieved import OSUHandle, Retrieved, RetrievedStep
from osumem.memory.store import (
    SCHEMA_VERSION,
    IncompatibleStoreError,
    MemoryStore,
    StoreError,
    StoreIntegrityError,
)

__all__ = [
    "DEFAULT_NAMESPACE",
    "SCHEMA_VERSION",
    "IncompatibleStoreError",
    "Memory",
    "MemoryConfig",
    "MemoryStore",
    "OSUHandle",
    "OversizedInputError",
    "Retrieved",
    "RetrievedStep",
    "StoreError",
    "StoreIntegrityError",
]
