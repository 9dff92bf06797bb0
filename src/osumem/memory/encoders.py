"""Choosing the encoder of a memory: by name, by path, or from the model id a store
recorded (so a reopened store encodes queries with the model that encoded its steps)."""

from __future__ import annotations

import re
from pathlib import Path

from osumem.embed import Encoder
from osumem.errors import InvalidInputError

#: The model id recorded when steps arrive with vectors and no encoder.
EXTERNAL_PREFIX = "external"

_HASHING = re.compile(r"^hashing(?::d(\d+))?(?::n(\d))?$")


def resolve_encoder(spec: Encoder | str | Path | None) -> Encoder | None:
    """An encoder from ``spec``.

    ``spec`` may be an :class:`~osumem.embed.Encoder` (returned as is), ``None``
    (none), ``"sbert"`` or ``"sbert:all-MiniLM-L6-v2"`` (the offline SBERT model behind
    the on-disk embedding cache), ``"sbert:/path"`` or a model directory path (that
    sentence-transformers model), or ``"hashing"`` / ``"hashing:d256:n1"`` (the light
    feature-hashing encoder, dimension and n-gram order optional).
    """
    if spec is None or isinstance(spec, Encoder):
        return spec  # type: ignore[return-value]
    from osumem.embed import HashingEncoder, load_encoder

    text = str(spec)
    m = _HASHING.match(text)
    if m:
        return HashingEncoder(int(m.group(1) or 256), ngram=int(m.group(2) or 1))
    if text in ("sbert", "sbert:all-MiniLM-L6-v2"):
        return load_encoder()
    if text.startswith(EXTERNAL_PREFIX):
        return None
    path = Path(text[len("sbert:") :] if text.startswith("sbert:") else text)
    if path.is_dir():
        return load_encoder(path)
    raise InvalidInputError(
        f"encoder {text!r}: expected 'sbert', 'hashing[:d<dim>[:n<1|2>]]' or a "
        "sentence-transformers model directory"
    )
