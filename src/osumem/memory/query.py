"""A retrieval's query checked at the memory's boundary: a non-empty text (then
encoded) or a finite vector of the store's dimension."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import DimensionError, InvalidInputError, NonFiniteError
from osumem.memory.validate import OversizedInputError


def query_vector(
    query: Any,
    *,
    max_text_chars: int,
    dim: int,
    encoder_id: str,
    encode: Callable[[str], NDArray[np.float32]],
) -> tuple[NDArray[np.float32], str | None]:
    """``query`` as a vector (and its text, when it is one): a text is checked and
    passed to ``encode``; a vector must be finite and of dimension ``dim`` (when the
    store has one; ``encoder_id`` names its encoder in the message)."""
    if isinstance(query, str):
        if not query.strip():
            raise InvalidInputError("query: empty text; give words to search for")
        if len(query) > max_text_chars:
            raise OversizedInputError(
                f"query: {len(query)} characters; max_text_chars is {max_text_chars}"
            )
        try:
            query.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError(
                f"query: not valid Unicode text (position {exc.start})"
            ) from None
        return encode(query), query
    if isinstance(query, bytes | bytearray | Mapping | set | frozenset) or not isinstance(
        query, np.ndarray | Sequence
    ):
        raise InvalidInputError(
            f"query: expected a text or a vector of numbers, got {type(query).__name__}"
        )
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            q = np.asarray(query, dtype=np.float32)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInputError(f"query: not a vector of numbers ({exc})") from None
    if q.ndim != 1 or q.shape[0] == 0:
        raise DimensionError(f"query: expected a non-empty 1-d vector, got shape {q.shape}")
    if dim and q.shape[0] != dim:
        raise DimensionError(
            f"query: vector has dimension {q.shape[0]}, the memory store has {dim} "
            f"(encoder {encoder_id!r})"
        )
    if not np.isfinite(q).all():
        raise NonFiniteError("query: the vector holds NaN or infinite values")
    return q, None
