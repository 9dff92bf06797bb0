"""Typed errors raised at the boundary. Each message says what is wrong and where."""

from __future__ import annotations

from typing import Any

#: Integers beyond a signed 64 bits are named by their size in messages (their
#: decimal text can be longer than Python prints).
_MAX_SHOWN_INT = 2**63 - 1


def show_value(value: Any) -> str:
    """A short, always printable rendering of a rejected value, for error messages."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _MAX_SHOWN_INT:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # a value whose repr fails is still named
        return f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


class OSUMemError(Exception):
    """Base class of every error this library raises on purpose."""


class InvalidInputError(OSUMemError, ValueError):
    """Input data (a log, a vector, a parameter) is malformed."""


class BudgetError(InvalidInputError):
    """A token budget is not a positive integer."""


class DimensionError(InvalidInputError):
    """A vector or matrix has the wrong shape for the memory it is used with."""


class NotFittedError(InvalidInputError):
    """A retriever was asked to retrieve (or hand over its state) before ``fit``."""


class NonFiniteError(InvalidInputError):
    """A vector holds NaN or infinite values."""


class UnknownMethodError(OSUMemError, KeyError):
    """A retrieval method name is not in the registry."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class ConfigError(InvalidInputError):
    """A method or benchmark parameter is unknown or out of range."""


class DataFileError(OSUMemError, FileNotFoundError):
    """A data file is missing or unreadable."""


class StoreError(OSUMemError):
    """The memory store cannot be opened, read or written (base of the store errors)."""


class StoreBusyError(StoreError):
    """Another process held the store's write lock for longer than the busy timeout."""


class StoreReadOnlyError(StoreError):
    """A write was asked of a store opened read-only (read-only file, folder or medium)."""


class StoreIOError(StoreError):
    """The operating system failed to read or write the store (disk full, I/O error)."""


class StoreCorruptError(StoreError):
    """The store is damaged: a missing table or column, a bad ``meta`` row, a short or
    non-finite embedding, a non-JSON column, or a page SQLite cannot read."""


class IncompatibleStoreError(StoreError):
    """The file is not a memory store of this version, or was made with another encoder."""


class ForeignStoreError(IncompatibleStoreError):
    """The file is not an osumem memory store (not SQLite, or SQLite with other tables)."""


class NewerSchemaError(IncompatibleStoreError):
    """The store was written with a schema version this osumem does not read."""


class StoreLocationError(StoreError, InvalidInputError):
    """A store location cannot be used: a server URL that does not parse, or names an
    option or schema the backend does not take."""


class StoreConnectionError(StoreIOError):
    """A store server cannot be reached (connection refused, unknown host, timed out,
    the database does not exist) or the connection to it was lost."""


class StoreAuthError(StoreError):
    """A store server refused the credentials (wrong password, unknown role, no right
    to connect to the database)."""


class MissingExtensionError(IncompatibleStoreError):
    """The database lacks an extension the store needs (Postgres: ``vector``, pgvector)
    and this connection may not create it."""


class DuplicateInputError(InvalidInputError):
    """A log already stored in the namespace was added again with ``on_duplicate="error"``."""


class MissingExtraError(OSUMemError, ImportError):
    """A feature needs an optional dependency (an extra) that is not installed; the
    message names the extra to install."""


class UnknownNamespaceError(InvalidInputError):
    """A namespace named for reading (show, export, view) holds no steps in the store."""


class InvalidFilterError(InvalidInputError):
    """A retrieval ``filter`` is malformed: an unknown operator or field, a value of the
    wrong type, or a key that no step of the namespace holds. The message names the
    clause (``filter['time']['$between']``)."""


class StepNotFoundError(InvalidInputError):
    """A step named by position or id is not in the namespace (delete, update, get)."""


class UnknownFilterKeyError(InvalidFilterError):
    """A filter names a metadata key that no step of the namespace holds (most often a
    misspelt key; an adapter whose framework treats it as "nothing matches" catches
    this one)."""


class MemoryProcessError(OSUMemError):
    """The process holding a memory (``AsyncMemory.open(..., process=True)``) could not
    be started, ended, or sent back an error that cannot cross processes; the message
    says which, with the process's exit code or the original error's type."""


class StaleResultError(OSUMemError):
    """The namespace changed after the retrieval, so it can no longer be explained
    (retrieve again)."""
