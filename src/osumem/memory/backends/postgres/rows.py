"""Step rows to and from Postgres: pgvector's binary ``vector`` format (a 16-bit
dimension, 16 unused bits, then big-endian float32 values, so an embedding round-trips
bit for bit), its psycopg adapters, and the parameters of one ``INSERT INTO steps``."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import MissingExtensionError, StoreCorruptError
from osumem.memory.backends.codec import step_columns
from osumem.memory.rows import StepRow

try:
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format
    from psycopg.types import TypeInfo
except ImportError:  # pragma: no cover - the postgres extra is checked at open
    Dumper = Loader = object  # type: ignore[assignment,misc]

_HEADER = struct.Struct(">HH")


class PgVector(bytes):
    """An embedding in pgvector's binary wire format (what the dumper sends)."""

    @classmethod
    def of(cls, values: NDArray[Any]) -> PgVector:
        """The wire form of a float32 vector."""
        v = np.ascontiguousarray(values, dtype=">f4").reshape(-1)
        return cls(_HEADER.pack(v.shape[0], 0) + v.tobytes())


class _VectorLoader(Loader):  # type: ignore[misc,valid-type]
    """``vector`` values in binary as raw bytes (decoded a whole column at a time)."""

    format = Format.BINARY

    def load(self, data: Any) -> bytes:
        return bytes(data)


class _VectorDumper(Dumper):  # type: ignore[misc,valid-type]
    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


def register_vector(conn: Any, name: str) -> None:
    """Teach ``conn`` the database's ``vector`` type (its oid differs per database)."""
    info = TypeInfo.fetch(conn, "vector")
    if info is None:
        raise MissingExtensionError(f"{name}: the database has no vector type (pgvector)")
    dumper = type("VectorDumper", (_VectorDumper,), {"oid": info.oid})
    conn.adapters.register_dumper(PgVector, dumper)
    conn.adapters.register_loader(info.oid, _VectorLoader)


def decode_vectors(
    blobs: Sequence[Any], ids: Sequence[int], dim: int, where: str
) -> NDArray[np.float32]:
    """A column of binary ``vector`` values as an ``(n, dim)`` float32 matrix; a value
    of another size names its step id."""
    width = 4 + 4 * dim
    for blob, step_id in zip(blobs, ids, strict=True):
        if not isinstance(blob, bytes) or len(blob) != width:
            size = (len(blob) - 4) // 4 if isinstance(blob, bytes) else type(blob).__name__
            raise StoreCorruptError(
                f"{where}: step id {step_id} has a {size}-value embedding, expected {dim}"
            )
    n = len(blobs)
    if not n:
        return np.zeros((0, dim), dtype=np.float32)
    raw = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(n, dim + 1)
    return raw[:, 1:].astype(np.float32)


def content_params(row: StepRow, embedding: NDArray[Any]) -> tuple[Any, ...]:
    """A step's content columns, role to embedding, as
    :data:`~osumem.memory.backends.postgres.sql.INSERT_STEP` and
    :data:`~osumem.memory.backends.postgres.sql.UPDATE_STEP` take them."""
    return (*step_columns(row), PgVector.of(embedding))


def step_params(
    namespace: str, position: int, batch: int, row: StepRow, embedding: NDArray[Any]
) -> tuple[Any, ...]:
    """The parameters of :data:`~osumem.memory.backends.postgres.sql.INSERT_STEP`."""
    return (namespace, position, batch, *content_params(row, embedding))


def metadata_params(step_id: int, row: StepRow) -> tuple[Any, ...]:
    """The parameters of the step's ``step_metadata`` row."""
    return (step_id, row.metadata_json, row.time, row.updated)
