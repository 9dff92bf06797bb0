"""The SQLite backend of the memory store: one file, WAL, one transaction per add.

Split by concern: :mod:`~.connection` (opening the file, transactions, typed errors),
:mod:`~.schema` (tables and ordered named migrations), :mod:`~.sql` (the statements),
:mod:`~.rows` (row encoding and checked decoding), :mod:`~.integrity` (the damage
checks) and :mod:`~.store` (:class:`SQLiteStore`, the interface's implementation).
"""

from osumem.memory.backends.sqlite.connection import SQLiteSettings, remove_store_files
from osumem.memory.backends.sqlite.store import SQLiteStore

__all__ = ["SQLiteSettings", "SQLiteStore", "remove_store_files"]
