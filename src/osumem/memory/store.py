"""The embedded persistent store of the agent memory: one SQLite file.

Why SQLite: it ships with Python, gives atomic transactions and survives a killed
writer. The store runs in WAL mode with ``synchronous=FULL``; every ``append`` is one
``BEGIN IMMEDIATE`` … ``COMMIT`` transaction, so a step is either wholly stored and
acknowledged, or not stored at all.

What is stored (schema version :data:`SCHEMA_VERSION`):

- ``meta``: the format name, schema version, library version that created the store,
  the encoder's model id and embedding dimension.
- ``steps``: one row per step: a global step id, the namespace, the position inside
  the namespace (0, 1, 2, … without gaps), the add-batch that wrote it, role, text,
  tool action, argument dict (JSON), tool signature, entities (sorted JSON list),
  subgoal, source episode, token cost and the L2-normalised float32 embedding (a blob
  of ``dim`` little-endian float32 values).
- ``batches``: the end position of every add-batch per namespace. Reopening replays
  the retriever's ``fit``/``update`` calls along these boundaries, so a reopened memory
  rebuilds exactly the structure the writing session had (no re-encoding).
- ``pending``: messages held back by the message reader (a trailing tool call whose
  response has not arrived yet), per namespace, stored in the same transaction.

Nothing here is pickled; a store is readable with any SQLite client.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import DataFileError, OSUMemError
from osumem.types import MemoryView

#: The format name written into every store.
STORE_FORMAT = "osumem-memory"
#: Bumped whenever the schema changes incompatibly; stores of another version are refused.
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY,
    ns TEXT NOT NULL,
    pos INTEGER NOT NULL CHECK (pos >= 0),
    batch INTEGER NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    tool_action TEXT NOT NULL,
    arguments TEXT NOT NULL,
    tool_signature TEXT NOT NULL,
    entities TEXT NOT NULL,
    subgoal TEXT NOT NULL,
    source TEXT NOT NULL,
    cost INTEGER NOT NULL CHECK (cost > 0),
    embedding BLOB NOT NULL,
    UNIQUE (ns, pos)
);
CREATE TABLE IF NOT EXISTS batches (
    id INTEGER PRIMARY KEY,
    ns TEXT NOT NULL,
    end_pos INTEGER NOT NULL,
    UNIQUE (ns, end_pos)
);
CREATE TABLE IF NOT EXISTS pending (ns TEXT PRIMARY KEY, messages TEXT NOT NULL);
"""


class StoreError(OSUMemError):
    """The memory store cannot be opened, read or written."""


class IncompatibleStoreError(StoreError):
    """The file is not a memory store of this version, or was made with another encoder."""


class StoreIntegrityError(StoreError):
    """The store failed its integrity check."""


@dataclass(frozen=True)
class StepRow:
    """One step as written to the store (all columns already validated)."""

    role: str
    text: str
    tool_action: str
    arguments_json: str
    tool_signature: str
    entities: tuple[str, ...]
    subgoal: str
    source: str
    cost: int


@dataclass(frozen=True)
class NamespaceData:
    """Everything stored for one namespace: its columnar view, step ids, arguments and
    the add-batch boundaries (end positions, increasing)."""

    view: MemoryView
    step_ids: NDArray[np.int64]
    arguments: tuple[str, ...]
    batch_ends: tuple[int, ...]


def _library_version() -> str:
    from osumem import __version__

    return __version__


class MemoryStore:
    """A SQLite-backed step store. ``path=None`` keeps everything in memory.

    Args:
        path: the database file (created if missing) or ``None``.
        synchronous: SQLite ``synchronous`` pragma; ``FULL`` (default) makes every
            acknowledged transaction durable even across power loss.
        timeout: seconds to wait for a lock held by another connection.
    """

    def __init__(
        self, path: str | Path | None = None, *, synchronous: str = "FULL", timeout: float = 30.0
    ) -> None:
        self.path = None if path is None else Path(path)
        target = ":memory:" if self.path is None else str(self.path)
        if self.path is not None and self.path.is_dir():
            raise DataFileError(f"memory store {self.path}: is a directory")
        if self.path is not None and not self.path.parent.exists():
            raise DataFileError(f"memory store {self.path}: folder {self.path.parent} missing")
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise StoreError(f"synchronous: expected OFF|NORMAL|FULL|EXTRA, got {synchronous!r}")
        try:
            self._conn = sqlite3.connect(target, timeout=timeout, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._init_schema()
        except sqlite3.DatabaseError as exc:
            raise IncompatibleStoreError(
                f"memory store {self.path}: not a readable SQLite database ({exc})"
            ) from exc

    # --- schema and meta ------------------------------------------------------------

    def _init_schema(self) -> None:
        tables = {
            r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if tables and "meta" not in tables:
            raise IncompatibleStoreError(
                f"memory store {self.path}: an SQLite file but not an osumem memory store "
                f"(tables: {sorted(tables)})"
            )
        if "meta" in tables:
            meta = self.meta()
            if meta.get("format") != STORE_FORMAT:
                raise IncompatibleStoreError(
                    f"memory store {self.path}: format {meta.get('format')!r}, "
                    f"expected {STORE_FORMAT!r}"
                )
            version = meta.get("schema_version")
            if version != str(SCHEMA_VERSION):
                raise IncompatibleStoreError(
                    f"memory store {self.path}: schema version {version} (written by osumem "
                    f"{meta.get('library_version', '?')}); this osumem "
                    f"({_library_version()}) reads version {SCHEMA_VERSION} only"
                )
            return
        with self._transaction():
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._conn.execute(statement)
            self._conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [
                    ("format", STORE_FORMAT),
                    ("schema_version", str(SCHEMA_VERSION)),
                    ("library_version", _library_version()),
                    ("model_id", ""),
                    ("dim", "0"),
                ],
            )

    def _transaction(self) -> _Txn:
        return _Txn(self._conn)

    def meta(self) -> dict[str, str]:
        """The ``meta`` table as a dict."""
        return dict(self._conn.execute("SELECT key, value FROM meta").fetchall())

    @property
    def model_id(self) -> str:
        """The encoder model id recorded at the first add ("" while empty)."""
        return self.meta().get("model_id", "")

    @property
    def dim(self) -> int:
        """The embedding dimension recorded at the first add (0 while empty)."""
        return int(self.meta().get("dim", "0"))

    # --- reading ---------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        """Namespaces holding at least one step or held message, sorted."""
        rows = self._conn.execute(
            "SELECT DISTINCT ns FROM steps UNION SELECT ns FROM pending ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]

    def n_steps(self, namespace: str) -> int:
        """Number of steps stored in ``namespace``."""
        (n,) = self._conn.execute(
            "SELECT COUNT(*) FROM steps WHERE ns = ?", (namespace,)
        ).fetchone()
        return int(n)

    def count_role(self, namespace: str, role: str) -> int:
        """Number of steps with ``role`` in ``namespace``."""
        (n,) = self._conn.execute(
            "SELECT COUNT(*) FROM steps WHERE ns = ? AND role = ?", (namespace, role)
        ).fetchone()
        return int(n)

    def pending(self, namespace: str) -> list[dict[str, Any]]:
        """Messages held back for ``namespace`` (empty list when none)."""
        row = self._conn.execute(
            "SELECT messages FROM pending WHERE ns = ?", (namespace,)
        ).fetchone()
        return [] if row is None else json.loads(row[0])

    def step_ids(self) -> list[int]:
        """Every stored step id, increasing."""
        return [r[0] for r in self._conn.execute("SELECT id FROM steps ORDER BY id")]

    def load(self, namespace: str) -> NamespaceData:
        """Read one namespace back as a columnar view (embeddings exactly as stored)."""
        rows = self._conn.execute(
            "SELECT id, role, text, tool_action, arguments, tool_signature, entities, subgoal, "
            "source, cost, embedding FROM steps WHERE ns = ? ORDER BY pos",
            (namespace,),
        ).fetchall()
        dim = self.dim
        n = len(rows)
        emb = np.zeros((n, dim), dtype=np.float32)
        for i, r in enumerate(rows):
            emb[i] = np.frombuffer(r[10], dtype="<f4")
        cols = list(zip(*rows, strict=True)) if rows else [()] * 11

        def obj(values: Sequence[Any]) -> NDArray[Any]:
            arr = np.empty(n, dtype=object)
            arr[:] = list(values)
            return arr

        view = MemoryView(
            embeddings=emb,
            costs=np.asarray(cols[9], dtype=np.int64).reshape(n),
            tool_actions=obj(cols[3]),
            tool_signatures=obj(cols[5]),
            entities=tuple(frozenset(json.loads(e)) for e in cols[6]),
            subgoals=obj(cols[7]),
            namespaces=obj(cols[8]),
            roles=obj(cols[1]),
            texts=obj(cols[2]),
        )
        ends = tuple(
            r[0]
            for r in self._conn.execute(
                "SELECT end_pos FROM batches WHERE ns = ? ORDER BY end_pos", (namespace,)
            )
        )
        return NamespaceData(
            view=view,
            step_ids=np.asarray(cols[0], dtype=np.int64).reshape(n),
            arguments=tuple(cols[4]),
            batch_ends=ends,
        )

    # --- writing ---------------------------------------------------------------------

    def append(
        self,
        namespace: str,
        rows: Sequence[StepRow],
        embeddings: NDArray[np.float32],
        *,
        model_id: str,
        pending: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """Append ``rows`` (with their L2-normalised ``embeddings``) to ``namespace`` in
        one transaction and replace the namespace's held messages by ``pending``.

        Returns the new step ids. Callers validate first; a failure here rolls back.
        """
        emb = np.ascontiguousarray(embeddings, dtype="<f4")
        if emb.shape[0] != len(rows):
            raise StoreError(f"append: {len(rows)} rows but {emb.shape[0]} embeddings")
        with self._transaction():
            meta = self.meta()
            dim = int(meta["dim"])
            if len(rows):
                if not meta["model_id"]:
                    self._conn.executemany(
                        "UPDATE meta SET value = ? WHERE key = ?",
                        [(model_id, "model_id"), (str(emb.shape[1]), "dim")],
                    )
                    dim = emb.shape[1]
                elif meta["model_id"] != model_id or dim != emb.shape[1]:
                    raise IncompatibleStoreError(
                        f"memory store {self.path}: made with encoder {meta['model_id']!r} "
                        f"(dim {dim}); got {model_id!r} (dim {emb.shape[1]})"
                    )
            (start,) = self._conn.execute(
                "SELECT COUNT(*) FROM steps WHERE ns = ?", (namespace,)
            ).fetchone()
            batch = None
            if len(rows):
                cur = self._conn.execute(
                    "INSERT INTO batches (ns, end_pos) VALUES (?, ?)",
                    (namespace, start + len(rows)),
                )
                batch = cur.lastrowid
            ids: list[int] = []
            for i, r in enumerate(rows):
                cur = self._conn.execute(
                    "INSERT INTO steps (ns, pos, batch, role, text, tool_action, arguments, "
                    "tool_signature, entities, subgoal, source, cost, embedding) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        namespace,
                        start + i,
                        batch,
                        r.role,
                        r.text,
                        r.tool_action,
                        r.arguments_json,
                        r.tool_signature,
                        json.dumps(sorted(r.entities), ensure_ascii=False),
                        r.subgoal,
                        r.source,
                        int(r.cost),
                        emb[i].tobytes(),
                    ),
                )
                ids.append(int(cur.lastrowid or 0))
            if pending is not None:
                if pending:
                    self._conn.execute(
                        "INSERT OR REPLACE INTO pending (ns, messages) VALUES (?, ?)",
                        (namespace, json.dumps(pending, ensure_ascii=False, sort_keys=True)),
                    )
                else:
                    self._conn.execute("DELETE FROM pending WHERE ns = ?", (namespace,))
        return ids

    # --- checks ----------------------------------------------------------------------

    def integrity_problems(self) -> list[str]:
        """Problems found by SQLite's ``integrity_check`` and the store's own checks
        (positions 0..n-1 per namespace, blob sizes, batch ends); empty when sound."""
        problems = [
            r[0] for r in self._conn.execute("PRAGMA integrity_check").fetchall() if r[0] != "ok"
        ]
        dim = self.dim
        for ns, n, lo, hi in self._conn.execute(
            "SELECT ns, COUNT(*), MIN(pos), MAX(pos) FROM steps GROUP BY ns"
        ):
            if lo != 0 or hi != n - 1:
                problems.append(f"namespace {ns!r}: positions {lo}..{hi} for {n} steps")
            (last,) = self._conn.execute(
                "SELECT MAX(end_pos) FROM batches WHERE ns = ?", (ns,)
            ).fetchone()
            if last != n:
                problems.append(f"namespace {ns!r}: last batch ends at {last}, {n} steps stored")
        (bad,) = self._conn.execute(
            "SELECT COUNT(*) FROM steps WHERE length(embedding) != ?", (4 * dim,)
        ).fetchone()
        if bad:
            problems.append(f"{bad} embedding blob(s) are not {dim} float32 values")
        return problems

    def check(self) -> None:
        """Raise :class:`StoreIntegrityError` listing every problem, if any."""
        problems = self.integrity_problems()
        if problems:
            raise StoreIntegrityError(f"memory store {self.path}: " + "; ".join(problems))

    def content_hash(self) -> str:
        """SHA-256 over every table's rows in a fixed order: equal hashes mean equal
        stored content (used to show a rejected input left the store unchanged)."""
        h = hashlib.sha256()
        for table, order in (
            ("meta", "key"),
            ("steps", "id"),
            ("batches", "id"),
            ("pending", "ns"),
        ):
            h.update(table.encode())
            for row in self._conn.execute(f"SELECT * FROM {table} ORDER BY {order}"):
                h.update(repr(row).encode())
        return h.hexdigest()

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None  # type: ignore[assignment]


class _Txn:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any exception."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self._conn.execute("COMMIT")
        else:
            self._conn.execute("ROLLBACK")
