"""What the SQL backends share above their connection: a store that keeps its
connection object as ``conn`` (with ``name``, ``read_only``, ``created``, ``timeout``,
``is_open``, ``in_transaction`` and ``close``) and records which of the later
migrations' tables it found."""

from __future__ import annotations

from typing import Any

from osumem.memory.backends.base import MemoryStore


class ConnectedStore(MemoryStore):
    """A :class:`MemoryStore` over a connection object ``conn``; its subclass sets
    :attr:`present` (the tables found at open) after opening."""

    conn: Any
    #: The tables of the store, as found (and migrated) at open.
    present: frozenset[str] = frozenset()

    @property
    def name(self) -> str:  # type: ignore[override]
        return str(self.conn.name)

    @property
    def read_only(self) -> bool:  # type: ignore[override]
        return bool(self.conn.read_only)

    @property
    def created(self) -> bool:  # type: ignore[override]
        return bool(self.conn.created)

    @property
    def timeout(self) -> float:
        """Seconds a write waits for another writer's lock."""
        return float(self.conn.timeout)

    @property
    def is_open(self) -> bool:
        return bool(self.conn.is_open)

    @property
    def in_transaction(self) -> bool:
        return bool(self.conn.in_transaction)

    def close(self) -> None:
        """Close the connection(s) (idempotent)."""
        self.conn.close()

    def schema_version(self) -> int:
        return int(self.meta()["schema_version"])

    @property
    def _has_digests(self) -> bool:
        return "digests" in self.present

    @property
    def _has_snapshots(self) -> bool:
        return "snapshots" in self.present

    @property
    def _has_held_sources(self) -> bool:
        return "held_sources" in self.present

    @property
    def _has_metadata(self) -> bool:
        return "step_metadata" in self.present

    @property
    def _has_edits(self) -> bool:
        return "namespace_edits" in self.present

    def _present(self) -> dict[str, bool]:
        """Which of the later migrations' tables the store holds."""
        return {t: t in self.present for t in ("digests", "snapshots", "held_sources")}
