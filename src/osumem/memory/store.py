"""Where the store's names lived before the backend interface (kept for one release).

The interface is :class:`osumem.memory.backends.MemoryStore`, opened with
:func:`osumem.memory.backends.open_store`; the SQLite file is
:class:`osumem.memory.backends.sqlite.SQLiteStore`; the records are in
:mod:`osumem.memory.rows`. ``MemoryStore(path)`` still opens a SQLite store, with a
DeprecationWarning.
"""

from importlib import import_module
from typing import Any

#: Each name this module held, and the module that holds it now.
_MOVED = {
    **dict.fromkeys(
        (
            "ForeignStoreError",
            "IncompatibleStoreError",
            "NewerSchemaError",
            "StoreBusyError",
            "StoreCorruptError",
            "StoreError",
            "StoreIOError",
            "StoreReadOnlyError",
        ),
        "osumem.errors",
    ),
    **dict.fromkeys(
        ("SCHEMA_VERSION", "STORE_FORMAT", "MemoryStore", "open_store"), "osumem.memory.backends"
    ),
    **dict.fromkeys(("SQLiteStore", "remove_store_files"), "osumem.memory.backends.sqlite"),
    **dict.fromkeys(("NamespaceData", "SnapshotRow", "StepRow"), "osumem.memory.rows"),
    "StoreIntegrityError": "osumem.memory",
}

__all__ = sorted(_MOVED)


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module), name)
