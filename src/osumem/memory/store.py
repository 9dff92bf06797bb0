"""Where the store's names lived before the backend interface (kept for one release).

The interface is :class:`osumem.memory.backends.MemoryStore`, opened with
:func:`osumem.memory.backends.open_store`; the SQLite file is
:class:`osumem.memory.backends.sqlite.SQLiteStore`; the records are in
:mod:`osumem.memory.rows`. ``MemoryStore(path)`` still opens a SQLite store, with a
DeprecationWarning.
"""

from osumem.errors import (
    ForeignStoreError,
    IncompatibleStoreError,
    NewerSchemaError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
    StoreReadOnlyError,
)
from osumem.memory import StoreIntegrityError
from osumem.memory.backends import SCHEMA_VERSION, STORE_FORMAT, MemoryStore, open_store
from osumem.memory.backends.sqlite import SQLiteStore, remove_store_files
from osumem.memory.rows import NamespaceData, SnapshotRow, StepRow

__all__ = [
    "SCHEMA_VERSION",
    "STORE_FORMAT",
    "ForeignStoreError",
    "IncompatibleStoreError",
    "MemoryStore",
    "NamespaceData",
    "NewerSchemaError",
    "SQLiteStore",
    "SnapshotRow",
    "StepRow",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreError",
    "StoreIOError",
    "StoreIntegrityError",
    "StoreReadOnlyError",
    "open_store",
    "remove_store_files",
]
