"""Step rows to SQLite: the parameters of one ``INSERT INTO steps`` (the embedding a
blob of little-endian float32 values); the decoding is shared
(:mod:`osumem.memory.backends.codec`)."""

from __future__ import annotations

from typing import Any

from numpy.typing import NDArray

from osumem.memory.backends.codec import (
    decode_pending,
    decode_steps,
    encode_pending,
    step_columns,
)
from osumem.memory.rows import StepRow

__all__ = ["decode_pending", "decode_steps", "encode_pending", "step_params"]


def step_params(
    namespace: str, position: int, batch: int, row: StepRow, embedding: NDArray[Any]
) -> tuple[Any, ...]:
    """The parameters of :data:`~osumem.memory.backends.sqlite.sql.INSERT_STEP`
    (``embedding``: little-endian float32)."""
    return (*step_columns(namespace, position, batch, row), embedding.tobytes())
