"""Step rows to SQLite: the parameters of one ``INSERT INTO steps`` and of the
content and metadata updates (the embedding a blob of little-endian float32 values);
the decoding is shared (:mod:`osumem.memory.backends.codec`)."""

from __future__ import annotations

from typing import Any

from numpy.typing import NDArray

from osumem.memory.backends.codec import (
    READ_CHUNK,
    decode_pending,
    decode_steps,
    encode_pending,
    read_step_rows,
    step_columns,
)
from osumem.memory.rows import StepRow

__all__ = [
    "READ_CHUNK",
    "content_params",
    "decode_pending",
    "decode_steps",
    "encode_pending",
    "metadata_params",
    "read_step_rows",
    "step_params",
]


def content_params(row: StepRow, embedding: NDArray[Any]) -> tuple[Any, ...]:
    """A step's content columns, role to embedding (``embedding``: little-endian
    float32), as :data:`~osumem.memory.backends.sqlite.sql.INSERT_STEP` and
    :data:`~osumem.memory.backends.sqlite.sql.UPDATE_STEP` take them."""
    return (*step_columns(row), embedding.tobytes())


def step_params(
    step_id: int,
    namespace: str,
    position: int,
    batch: int,
    row: StepRow,
    embedding: NDArray[Any],
) -> tuple[Any, ...]:
    """The parameters of :data:`~osumem.memory.backends.sqlite.sql.INSERT_STEP`."""
    return (step_id, namespace, position, batch, *content_params(row, embedding))


def metadata_params(step_id: int, row: StepRow) -> tuple[Any, ...]:
    """The parameters of the step's ``step_metadata`` row."""
    return (step_id, row.metadata_json, row.time, row.updated)
