"""The lexical view: an incremental BM25 index over step texts.

:class:`LexicalIndex` holds one document per step (its text, as stored) and ranks them
by Okapi BM25 for a query text. It is built for an agent's memory: steps are added one
batch at a time (:meth:`LexicalIndex.add`, amortised O(new text)), a query touches only
the postings of its own terms, and its whole state is a plain dict of NumPy arrays
(:meth:`LexicalIndex.state` / :meth:`LexicalIndex.from_state`) that a snapshot stores.

Text analysis (:func:`tokenize`): Unicode NFKC, case folded; tokens are runs of letters
and digits (an underscore, a hyphen or any punctuation separates them, so
``get_user_details`` gives ``get``, ``user``, ``details``); every Han, Hiragana or
Katakana character is a token of its own (those scripts do not separate words);
tokens in the stoplist (:data:`ENGLISH_STOP_WORDS`, the Glasgow Information Retrieval
Group's English stop words that scikit-learn ships) are dropped. ``stem=True`` adds
the "S" stemmer (plural endings: ``-ies`` → ``-y``, ``-es`` → ``-e``, ``-s`` → ``""``;
Harman 1991).

Scoring (Lucene's BM25, ``k1`` = 1.2, ``b`` = 0.75): for a query's distinct terms,
``Σ idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·dl/avgdl))`` with
``idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))``. With ``limit`` (a causal query:
only the first ``limit`` steps exist) N, df and avgdl are those of the first
``limit`` steps, so nothing later leaks into a score.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.annotate import ENGLISH_STOP_WORDS
from osumem.errors import InvalidInputError, NotFittedError

#: Scripts written without spaces between words: each character is a token.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")

#: BM25 parameters (Lucene's defaults).
K1 = 1.2
B = 0.75

#: The postings of the steps added since the last merge are scanned directly until
#: there are more than ``max(TAIL_MIN, n / TAIL_RATIO)`` of them; then they are merged
#: into the term-major arrays (amortised O(1) per posting).
TAIL_MIN = 1024
TAIL_RATIO = 16


def s_stem(token: str) -> str:
    """The "S" stemmer (Harman 1991): ``-ies`` → ``-y`` (not ``-eies``/``-aies``),
    ``-es`` → ``-e`` (not ``-aes``/``-ees``/``-oes``), ``-s`` → ``""`` (not ``-us``/
    ``-ss``); other words unchanged."""
    if len(token) > 3 and token.endswith("ies") and token[-4] not in "ae":
        return token[:-3] + "y"
    if len(token) > 2 and token.endswith("es") and token[-3] not in "aeo":
        return token[:-1]
    if len(token) > 1 and token.endswith("s") and token[-2] not in "us":
        return token[:-1]
    return token


def tokenize(
    text: str, *, stopwords: frozenset[str] = ENGLISH_STOP_WORDS, stem: bool = False
) -> list[str]:
    """The index terms of ``text`` (see the module docstring); ``[]`` for a text of
    stop words, punctuation or whitespace only."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    tokens = [t for t in _TOKEN_RE.findall(folded) if t not in stopwords]
    return [s_stem(t) for t in tokens] if stem else tokens


class _Growing:
    """An append-only NumPy buffer (capacity doubling)."""

    def __init__(self, dtype: Any, data: NDArray[Any] | None = None) -> None:
        arr = np.zeros(0, dtype=dtype) if data is None else np.asarray(data, dtype=dtype)
        self._buf = np.empty(max(16, 2 * arr.shape[0]), dtype=dtype)
        self._buf[: arr.shape[0]] = arr
        self.size = int(arr.shape[0])

    def extend(self, values: NDArray[Any]) -> None:
        need = self.size + int(values.shape[0])
        if need > self._buf.shape[0]:
            grown = np.empty(max(need, 2 * self._buf.shape[0]), dtype=self._buf.dtype)
            grown[: self.size] = self._buf[: self.size]
            self._buf = grown
        self._buf[self.size : need] = values
        self.size = need

    @property
    def array(self) -> NDArray[Any]:
        return self._buf[: self.size]


class LexicalIndex:
    """An incremental BM25 index: one document per step, positions 0, 1, 2, ...

    Args:
        k1, b: the BM25 parameters.
        stopwords: terms never indexed or searched (default: :data:`ENGLISH_STOP_WORDS`).
        stem: apply :func:`s_stem` to every term.
    """

    def __init__(
        self,
        *,
        k1: float = K1,
        b: float = B,
        stopwords: Iterable[str] = ENGLISH_STOP_WORDS,
        stem: bool = False,
    ) -> None:
        if not (math.isfinite(k1) and k1 >= 0 and math.isfinite(b) and 0 <= b <= 1):
            raise InvalidInputError(f"LexicalIndex: need k1 >= 0 and 0 <= b <= 1, got {k1}, {b}")
        self.k1 = float(k1)
        self.b = float(b)
        self.stopwords = frozenset(stopwords)
        self.stem = bool(stem)
        self._vocab: dict[str, int] = {}
        self._terms: list[str] = []
        self._df = _Growing(np.int64)
        self._doc_ptr = _Growing(np.int64, np.zeros(1, dtype=np.int64))
        self._doc_terms = _Growing(np.int32)
        self._doc_tfs = _Growing(np.int32)
        self._doc_len = _Growing(np.int32)
        self._total_len = 0
        # term-major postings of documents [0, _merged): CSC arrays
        self._merged = 0
        self._col_ptr = np.zeros(1, dtype=np.int64)
        self._col_docs = np.zeros(0, dtype=np.int32)
        self._col_tfs = np.zeros(0, dtype=np.int32)
        # the last query text's term ids, while the vocabulary has not grown
        self._last_query: tuple[str | None, int, NDArray[np.int64]] = (
            None,
            0,
            np.zeros(0, np.int64),
        )

    # --- size ------------------------------------------------------------------------

    @property
    def n(self) -> int:
        """Number of documents (steps) indexed."""
        return self._doc_len.size

    def __len__(self) -> int:
        return self.n

    @property
    def n_terms(self) -> int:
        """Size of the vocabulary."""
        return len(self._terms)

    # --- building ----------------------------------------------------------------------

    def terms_of(self, text: str) -> list[str]:
        """``text``'s index terms under this index's analysis."""
        return tokenize(text, stopwords=self.stopwords, stem=self.stem)

    def add(self, texts: Sequence[str]) -> None:
        """Append one document per text (the next positions)."""
        ids: list[int] = []
        tfs: list[int] = []
        lens: list[int] = []
        ptr: list[int] = []
        new_df: Counter[int] = Counter()
        end = self._doc_terms.size
        vocab, terms = self._vocab, self._terms
        for text in texts:
            if not isinstance(text, str):
                raise InvalidInputError(f"LexicalIndex.add: expected texts, got {type(text)}")
            counts = Counter(self.terms_of(text))
            for term, tf in counts.items():
                tid = vocab.get(term)
                if tid is None:
                    tid = vocab[term] = len(terms)
                    terms.append(term)
                ids.append(tid)
                tfs.append(tf)
                new_df[tid] += 1
            lens.append(sum(counts.values()))
            end += len(counts)
            ptr.append(end)
        if not lens:
            return
        grow = len(terms) - self._df.size
        if grow:
            self._df.extend(np.zeros(grow, dtype=np.int64))
        if new_df:
            df = self._df.array
            keys = np.fromiter(new_df.keys(), dtype=np.int64, count=len(new_df))
            df[keys] += np.fromiter(new_df.values(), dtype=np.int64, count=len(new_df))
        self._doc_terms.extend(np.asarray(ids, dtype=np.int32))
        self._doc_tfs.extend(np.asarray(tfs, dtype=np.int32))
        self._doc_len.extend(np.asarray(lens, dtype=np.int32))
        self._doc_ptr.extend(np.asarray(ptr, dtype=np.int64))
        self._total_len += sum(lens)
        if self.n - self._merged > max(TAIL_MIN, self.n // TAIL_RATIO):
            self._merge()

    def _merge(self) -> None:
        """Rebuild the term-major postings over every document (docs ascending within
        a term: a stable sort of the document-major arrays by term)."""
        terms = self._doc_terms.array
        order = np.argsort(terms, kind="stable")
        doc_of = np.repeat(
            np.arange(self.n, dtype=np.int32), np.diff(self._doc_ptr.array).astype(np.int64)
        )
        self._col_docs = doc_of[order]
        self._col_tfs = self._doc_tfs.array[order]
        counts = np.bincount(terms, minlength=self.n_terms)
        self._col_ptr = np.zeros(self.n_terms + 1, dtype=np.int64)
        np.cumsum(counts, out=self._col_ptr[1:])
        self._merged = self.n

    # --- scoring -------------------------------------------------------------------------

    def query_terms(self, text: str | None) -> NDArray[np.int64]:
        """The distinct indexed term ids of a query text (terms the index has never
        seen cannot score and are left out), in order of first appearance."""
        if not text:
            return np.zeros(0, dtype=np.int64)
        last = self._last_query
        if last[0] == text and last[1] == self.n_terms:
            return last[2]  # the same text again (a retriever's check, then its scoring)
        ids = [self._vocab.get(t) for t in dict.fromkeys(self.terms_of(text))]
        tids = np.asarray([i for i in ids if i is not None], dtype=np.int64)
        tids.flags.writeable = False
        self._last_query = (text, self.n_terms, tids)
        return tids

    def _postings(
        self, tids: NDArray[np.int64], limit: int
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
        """Every posting of the terms ``tids`` in documents ``< limit``: (term slot in
        ``tids``, document, tf)."""
        slots, docs, tfs = [], [], []
        cut = min(limit, self._merged)
        ptr = self._col_ptr
        for k, t in enumerate(tids.tolist()):
            if t + 1 >= ptr.shape[0]:
                continue  # a term first seen after the last merge
            lo, hi = int(ptr[t]), int(ptr[t + 1])
            d = self._col_docs[lo:hi]
            if cut < self._merged:
                hi = lo + int(np.searchsorted(d, cut))
                d = d[: hi - lo]
            if d.shape[0]:
                slots.append(np.full(d.shape[0], k, dtype=np.int64))
                docs.append(d.astype(np.int64))
                tfs.append(self._col_tfs[lo:hi])
        if limit > self._merged:
            # the tail: documents added since the last merge, scanned directly
            start = int(self._doc_ptr.array[self._merged])
            stop = int(self._doc_ptr.array[min(limit, self.n)])
            tail_terms = self._doc_terms.array[start:stop]
            # each tail posting's slot in tids (by a search in the sorted ids: no
            # array over the whole vocabulary)
            by_id = np.argsort(tids)
            sorted_ids = tids[by_id]
            found = np.minimum(np.searchsorted(sorted_ids, tail_terms), tids.shape[0] - 1)
            at = np.flatnonzero(sorted_ids[found] == tail_terms)
            if at.shape[0]:
                ptr_tail = self._doc_ptr.array[self._merged : min(limit, self.n) + 1]
                doc = np.searchsorted(ptr_tail, start + at, side="right") - 1 + self._merged
                slots.append(by_id[found[at]])
                docs.append(doc.astype(np.int64))
                tfs.append(self._doc_tfs.array[start + at])
        if not slots:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=np.float64)
        return (
            np.concatenate(slots),
            np.concatenate(docs),
            np.concatenate(tfs).astype(np.float64),
        )

    def _stats(self, limit: int) -> tuple[int, float]:
        """(N, avgdl) of the first ``limit`` documents."""
        if limit >= self.n:
            total = self._total_len
            n = self.n
        else:
            n = limit
            total = int(self._doc_len.array[:limit].sum(dtype=np.int64))
        return n, (total / n if n else 0.0)

    def _term_scores(
        self, text: str | None, limit: int
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(documents, their BM25 contribution) per posting of the query's terms."""
        limit = max(0, min(int(limit), self.n))
        tids = self.query_terms(text)
        if limit == 0 or tids.shape[0] == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        slots, docs, tf = self._postings(tids, limit)
        if docs.shape[0] == 0:
            return docs, tf
        n, avgdl = self._stats(limit)
        df = np.bincount(slots, minlength=tids.shape[0]).astype(np.float64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        dl = self._doc_len.array[docs].astype(np.float64)
        norm = self.k1 * (1.0 - self.b + self.b * dl / max(avgdl, 1e-12))
        return docs, idf[slots] * tf * (self.k1 + 1.0) / (tf + norm)

    def score_all(self, text: str | None, limit: int | None = None) -> NDArray[np.float64]:
        """The BM25 score of every document ``< limit`` (default: all) for ``text``
        (zeros for a text without indexed terms)."""
        limit = self.n if limit is None else max(0, min(int(limit), self.n))
        docs, contrib = self._term_scores(text, limit)
        full = np.bincount(docs, weights=contrib, minlength=limit)[:limit]
        return np.asarray(full, dtype=np.float64)

    def matches(
        self, text: str | None, limit: int | None = None
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """The documents ``< limit`` the query's terms reach, ascending, and their BM25
        scores: the nonzero entries of :meth:`score_all` (the same values, bit for
        bit: every document's contributions are summed in the same order), computed
        from the postings of the query's terms only, in O(postings), not O(limit)."""
        limit = self.n if limit is None else max(0, min(int(limit), self.n))
        docs, contrib = self._term_scores(text, limit)
        if docs.shape[0] == 0:
            return docs, contrib
        # the postings are runs of ascending documents (one per term, then the tail),
        # which a stable sort merges; it keeps each document's contributions in their
        # order of appearance, and bincount adds them in that order, as score_all's
        # bincount over the documents does
        order = np.argsort(docs, kind="stable")
        docs = docs[order]
        first = np.empty(docs.shape[0], dtype=bool)
        first[0] = True
        np.not_equal(docs[1:], docs[:-1], out=first[1:])
        total = np.bincount(np.cumsum(first) - 1, weights=contrib[order])
        return docs[first], np.asarray(total, dtype=np.float64)

    def scores(
        self,
        text: str | None,
        positions: Sequence[int] | NDArray[Any],
        *,
        limit: int | None = None,
    ) -> NDArray[np.float64]:
        """The BM25 score of the documents at ``positions`` for the query ``text``
        (statistics of the first ``limit`` documents; default: all). A position at
        or past ``limit`` scores 0."""
        pos = np.asarray(positions, dtype=np.int64).reshape(-1)
        if pos.shape[0] and (pos.min() < 0 or pos.max() >= self.n):
            raise InvalidInputError(f"scores: positions must lie in [0, {self.n}), got {positions}")
        full = self.score_all(text, limit)
        out = np.zeros(pos.shape[0], dtype=np.float64)
        inside = pos < full.shape[0]
        out[inside] = full[pos[inside]]
        return out

    def ranking(
        self, text: str | None, limit: int | None = None
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """The documents ``< limit`` with a positive score, best first (ties by
        position), and their scores."""
        uniq, total = self.matches(text, limit)
        keep = total > 0
        uniq, total = uniq[keep], total[keep]
        order = np.lexsort((uniq, -total))
        return uniq[order], total[order]

    # --- state ---------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The whole index as a plain dict of NumPy arrays (no objects: an ``.npz``
        without pickle holds it). The term-major postings are derived and rebuilt by
        :meth:`from_state`."""
        blob = "\x00".join(self._terms).encode("utf-8")
        return {
            "format": np.int64(LEXICAL_STATE_FORMAT),
            "params": np.asarray([self.k1, self.b], dtype=np.float64),
            "stem": np.bool_(self.stem),
            "stopwords": np.frombuffer(
                "\x00".join(sorted(self.stopwords)).encode("utf-8"), dtype=np.uint8
            ).copy(),
            "terms": np.frombuffer(blob, dtype=np.uint8).copy(),
            "n_terms": np.int64(self.n_terms),
            "doc_ptr": self._doc_ptr.array.copy(),
            "doc_terms": self._doc_terms.array.copy(),
            "doc_tfs": self._doc_tfs.array.copy(),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> LexicalIndex:
        """The index :meth:`state` describes (``ValueError`` / ``KeyError`` for a state
        of another format or a damaged one)."""
        if int(state["format"]) != LEXICAL_STATE_FORMAT:
            raise ValueError(f"lexical index state format {int(state['format'])}")
        k1, b = (float(x) for x in np.asarray(state["params"], dtype=np.float64))
        words = bytes(np.asarray(state["stopwords"], dtype=np.uint8)).decode("utf-8")
        index = cls(
            k1=k1, b=b, stopwords=words.split("\x00") if words else (), stem=bool(state["stem"])
        )
        blob = bytes(np.asarray(state["terms"], dtype=np.uint8)).decode("utf-8")
        n_terms = int(state["n_terms"])
        terms = blob.split("\x00") if n_terms else []
        if len(terms) != n_terms or len(set(terms)) != n_terms:
            raise ValueError("lexical index state: vocabulary does not match its size")
        ptr = np.asarray(state["doc_ptr"], dtype=np.int64)
        doc_terms = np.asarray(state["doc_terms"], dtype=np.int32)
        doc_tfs = np.asarray(state["doc_tfs"], dtype=np.int32)
        if (
            ptr.ndim != 1
            or ptr.shape[0] < 1
            or ptr[0] != 0
            or ptr[-1] != doc_terms.shape[0]
            or doc_tfs.shape != doc_terms.shape
            or (np.diff(ptr) < 0).any()
            or (doc_terms.shape[0] and (doc_terms.min() < 0 or doc_terms.max() >= n_terms))
            or (doc_tfs.shape[0] and doc_tfs.min() < 1)
        ):
            raise ValueError("lexical index state: inconsistent postings")
        index._terms = terms
        index._vocab = {t: i for i, t in enumerate(terms)}
        index._doc_ptr = _Growing(np.int64, ptr)
        index._doc_terms = _Growing(np.int32, doc_terms)
        index._doc_tfs = _Growing(np.int32, doc_tfs)
        doc_of = np.repeat(np.arange(ptr.shape[0] - 1), np.diff(ptr))
        lens = np.bincount(doc_of, weights=doc_tfs, minlength=ptr.shape[0] - 1)
        index._doc_len = _Growing(np.int32, lens.astype(np.int32))
        index._total_len = int(doc_tfs.sum(dtype=np.int64))
        index._df = _Growing(np.int64, np.bincount(doc_terms, minlength=n_terms))
        if index.n:
            index._merge()
        return index

    def copy_prefix(self, n: int) -> LexicalIndex:
        """A new index holding the first ``n`` documents only."""
        n = max(0, min(int(n), self.n))
        ptr = self._doc_ptr.array[: n + 1]
        end = int(ptr[-1])
        state = self.state()
        state["doc_ptr"] = ptr.copy()
        state["doc_terms"] = self._doc_terms.array[:end].copy()
        state["doc_tfs"] = self._doc_tfs.array[:end].copy()
        return LexicalIndex.from_state(state)


#: Version of the :meth:`LexicalIndex.state` layout.
LEXICAL_STATE_FORMAT = 1


def fitted_index(index: LexicalIndex | None, owner: object) -> LexicalIndex:
    """``index``, or a :class:`~osumem.errors.NotFittedError` naming ``owner`` (a
    retriever) while it has not built one (before ``fit``)."""
    if index is None:
        raise NotFittedError(f"{type(owner).__name__}: call fit() first")
    return index
