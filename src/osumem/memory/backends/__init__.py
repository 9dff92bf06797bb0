"""Memory store backends behind one interface (:class:`MemoryStore`).

:func:`open_store` opens a store by location: ``None`` (in memory) or a file path
opens the SQLite backend; ``postgresql://...`` (or ``postgres://``) the Postgres
backend (the ``postgres`` extra); ``<scheme>://...`` the backend registered for that
scheme with :func:`register_backend`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from osumem.errors import InvalidInputError
from osumem.memory.backends import base as _base
from osumem.memory.backends.base import SCHEMA_VERSION, STORE_FORMAT, MemoryStore
from osumem.memory.backends.sqlite import SQLiteStore

_base.LEGACY_STORE = SQLiteStore

__all__ = [
    "SCHEMA_VERSION",
    "STORE_FORMAT",
    "MemoryStore",
    "available_backends",
    "open_store",
    "register_backend",
]

#: An opener: ``(location, read_only=..., timeout=...) -> MemoryStore``.
Opener = Callable[..., MemoryStore]

_SCHEMES: dict[str, Opener] = {}
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def register_backend(scheme: str, opener: Opener) -> None:
    """Open locations ``<scheme>://...`` with ``opener`` (a backend's store class or
    factory, called as ``opener(location, read_only=..., timeout=...)``)."""
    _SCHEMES[scheme.lower()] = opener


def _open_postgres(location: str, **settings: Any) -> MemoryStore:
    from osumem.memory.backends.postgres import PostgresStore  # psycopg only when used

    return PostgresStore(location, **settings)


def available_backends() -> list[str]:
    """The backends :func:`open_store` can open: ``sqlite`` and every registered
    scheme."""
    return ["sqlite", *sorted(_SCHEMES)]


for _scheme in ("postgresql", "postgres"):
    register_backend(_scheme, _open_postgres)


def open_store(
    location: str | Path | None = None,
    *,
    read_only: bool = False,
    timeout: float = 30.0,
    **settings: Any,
) -> MemoryStore:
    """Open (or create) the store at ``location``: ``None`` keeps it in memory, a path
    is a SQLite file, ``<scheme>://...`` a registered backend. ``settings`` go to the
    backend (SQLite: ``synchronous``; Postgres: ``connect_timeout``, ``pool_size``)."""
    if isinstance(location, str):
        m = _URL.match(location)
        if m:
            scheme = m.group(1).lower()
            opener = _SCHEMES.get(scheme)
            if opener is None:
                raise InvalidInputError(
                    f"store {location!r}: no backend for {scheme}:// (known: "
                    f"{', '.join(available_backends())}; a plain path is a SQLite file)"
                )
            return opener(location, read_only=read_only, timeout=timeout, **settings)
    return SQLiteStore(location, read_only=read_only, timeout=timeout, **settings)
