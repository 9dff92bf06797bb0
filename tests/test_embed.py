"""Encoders: the hashing encoder, the on-disk cache, and the real SBERT model."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import osumem.embed as embed_module
from conftest import sbert_available
from osumem.embed import CachedEncoder, Encoder, HashingEncoder, word_tokens
from osumem.errors import InvalidInputError


class CountingEncoder:
    """Wraps an encoder and counts the texts it is asked to encode."""

    def __init__(self, inner: Encoder) -> None:
        self.inner = inner
        self.calls: list[list[str]] = []

    @property
    def encoder_id(self) -> str:
        return self.inner.encoder_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts):
        self.calls.append(list(texts))
        return self.inner.encode(texts)

    def count_tokens(self, texts):
        return self.inner.count_tokens(texts)


def test_hashing_encoder_is_deterministic_normalised_and_lexical() -> None:
    enc = HashingEncoder(64)
    v = enc.encode(["Hello world", "hello, WORLD!", "", "other thing"])
    assert v.shape == (4, 64) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), [1, 1, 0, 1], atol=1e-6)
    # Same words (case and punctuation ignored) give the same vector.
    np.testing.assert_array_equal(v[0], v[1])
    np.testing.assert_array_equal(HashingEncoder(64).encode(["Hello world"])[0], v[0])
    assert isinstance(enc, Encoder)
    assert enc.encoder_id != HashingEncoder(32).encoder_id


def test_hashing_encoder_counts_word_tokens() -> None:
    enc = HashingEncoder(16)
    assert word_tokens("get_user_details(user_id='mia_li_3668')") == [
        "get_user_details",
        "user_id",
        "mia_li_3668",
    ]
    assert enc.count_tokens(["a b c", "", "x"]).tolist() == [3, 1, 1]


def _hashing_reference(texts: list[str], dim: int, ngram: int) -> np.ndarray:
    """The hashing encoder as first written: a BLAKE2b hash per feature occurrence,
    ``np.add.at`` of the signs, ``np.linalg.norm``."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        feats = word_tokens(text)
        if ngram == 2:
            feats = feats + [f"{a} {b}" for a, b in itertools.pairwise(feats)]
        if not feats:
            continue
        digests = [hashlib.blake2b(f.encode(), digest_size=8).digest() for f in feats]
        h = np.frombuffer(b"".join(digests), dtype="<u8")
        buckets = (h % np.uint64(dim)).astype(np.int64)
        signs = np.where((h >> np.uint64(63)) == 1, -1.0, 1.0).astype(np.float32)
        np.add.at(out[i], buckets, signs)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return (out / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)


_WORDS = st.sampled_from(["alpha", "Beta", "gamma", "straße", "ünï", "x1", "_", "9", "aisle"])


@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(
        st.lists(st.one_of(_WORDS, st.text(max_size=6)), max_size=40).map(" ".join),
        min_size=1,
        max_size=4,
    ),
    dim=st.sampled_from([1, 7, 64, 256]),
    ngram=st.sampled_from([1, 2]),
)
def test_hashing_encoder_equals_its_reference_bit_for_bit(texts, dim, ngram) -> None:
    """The cached hashes and the exact norm of integer counts change no bit of any
    vector (or token count) the per-occurrence hashing gave, in any order of calls."""
    enc = HashingEncoder(dim, ngram=ngram)
    want = _hashing_reference(texts, dim, ngram)
    assert enc.encode(texts).tobytes() == want.tobytes()
    assert enc.encode(texts[::-1]).tobytes() == want[::-1].tobytes()  # from the cache
    for t, row in zip(texts, want, strict=True):  # the token count, then the text alone
        assert enc.count_tokens([t])[0] == max(1, len(word_tokens(t)))
        assert enc.encode([t]).tobytes() == row.tobytes()


def test_hashing_encoder_large_counts_and_a_full_cache(monkeypatch) -> None:
    """Bucket counts of 4,097 and 114 (a sum of squares past float32's exact integers,
    where float32 and exact arithmetic round apart) take ``np.linalg.norm``; a full
    hash cache starts again; both give the reference."""
    texts = ["seat " * 4097 + "aisle " * 114, "seat aisle window", ""]
    enc = HashingEncoder(32)
    assert enc.encode(texts).tobytes() == _hashing_reference(texts, 32, 1).tobytes()
    assert enc.encode([]).shape == (0, 32) and enc.encode([]).dtype == np.float32
    monkeypatch.setattr(embed_module, "HASH_SLOTS_MAX", 2)
    small = HashingEncoder(32, ngram=2)
    many = [" ".join(f"w{i}" for i in range(j, j + 7)) for j in range(20)]
    assert small.encode(many).tobytes() == _hashing_reference(many, 32, 2).tobytes()
    assert len(small._slots) <= 2


@pytest.mark.parametrize("dim", [0, -3, 2.5, True])
def test_hashing_encoder_rejects_bad_dim(dim) -> None:
    with pytest.raises(InvalidInputError, match="dim"):
        HashingEncoder(dim)


def test_cache_second_call_hits_cache_and_returns_identical_vectors(tmp_path) -> None:
    inner = CountingEncoder(HashingEncoder(32, ngram=2))
    texts = ["alpha beta", "gamma", "alpha beta", "delta epsilon"]
    with CachedEncoder(inner, tmp_path / "c.db") as enc:
        first = enc.encode(texts)
        assert inner.calls == [["alpha beta", "gamma", "delta epsilon"]]  # de-duplicated
        second = enc.encode(texts[::-1])
        assert len(inner.calls) == 1  # all hits
        np.testing.assert_array_equal(second, first[::-1])
    # A new process-like instance reads the same file.
    inner2 = CountingEncoder(HashingEncoder(32, ngram=2))
    with CachedEncoder(inner2, tmp_path / "c.db") as enc2:
        np.testing.assert_array_equal(enc2.encode(["gamma", "new text"])[0], first[1])
        assert inner2.calls == [["new text"]]


def test_cache_is_keyed_by_model(tmp_path) -> None:
    path = tmp_path / "c.db"
    with CachedEncoder(HashingEncoder(32), path) as a:
        va = a.encode(["same text"])
    inner = CountingEncoder(HashingEncoder(32, ngram=2))
    with CachedEncoder(inner, path) as b:
        b.encode(["same text"])
    assert inner.calls == [["same text"]]  # other model id: a miss, not a wrong hit
    assert va.shape == (1, 32)


@pytest.mark.sbert
@pytest.mark.skipif(not sbert_available(), reason="needs the sbert extra")
def test_real_sbert_encoder_on_a_few_sentences(tmp_path) -> None:
    """The real all-MiniLM-L6-v2 (offline): 384-d unit vectors, paraphrases closer than
    unrelated sentences, and token counts from its WordPiece tokenizer."""
    from osumem.embed import SBERTEncoder

    enc = SBERTEncoder()
    assert enc.dim == 384 and enc.encoder_id == "sbert:all-MiniLM-L6-v2"
    v = enc.encode(
        [
            "Book a flight from New York to Seattle.",
            "Reserve a plane ticket from NYC to Seattle.",
            "The cat sleeps on the sofa.",
        ]
    )
    assert v.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3
    counts = enc.count_tokens(["hello world", "reservation"])
    assert counts[0] == 2 and counts[1] >= 1
    with CachedEncoder(enc, tmp_path / "s.db") as cached:
        np.testing.assert_allclose(
            cached.encode(["The cat sleeps on the sofa."])[0], v[2], atol=1e-6
        )
