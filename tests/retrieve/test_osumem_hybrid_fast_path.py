"""osumem_hybrid's large-memory path reads only the postings of the query's words and
the steps next to them: the same selections as the dense code it replaced (its lexical
side kept here as the reference), on many queries, budgets and limits, exact scan and
HNSW head; the small-memory exact fusion against a copy of the code as evaluated."""

import numpy as np
import pytest

import osumem.retrieve.osumem_hybrid as hybrid_module
from osumem.bench.scale import generate
from osumem.retrieve import create
from osumem.retrieve.lexical import LexicalIndex
from osumem.retrieve.packing import pack_first_fit
from osumem.types import MemoryView

# --- the reference: the dense code of the large-memory path before it read postings ---


def reference_neighbours(same, beta, score, limit):
    """The neighbour pass over every step (dense arrays): each step before ``limit``
    adds ``beta`` times the better score of its neighbours in the same segment (a step
    next to no hit adds 0.0, which leaves its score as it is, bit for bit)."""
    if beta <= 0 or limit < 2:
        return score
    s = score[:limit]
    joined = same[: limit - 1]
    from_left = np.concatenate([[0.0], np.where(joined, s[:-1], 0.0)])
    from_right = np.concatenate([np.where(joined, s[1:], 0.0), [0.0]])
    out = score.copy()
    out[:limit] = s + beta * np.maximum(from_left, from_right)
    return out


def reference_head_fused(r, q, text, budget, limit):
    """``HybridOSUMem._head_fused`` with its lexical side as it was: dense score arrays
    over every step (``score_all``, the dense neighbour pass, ``flatnonzero``); the
    fusion of the two heads that follows is the retriever's own, unchanged."""
    bm = reference_neighbours(
        r._same, r.cfg.neighbour_weight, r.fitted_lexical.score_all(text, limit), limit
    )
    matched = np.flatnonzero(bm)
    return r._pack_fused_heads(q, budget, limit, matched, bm[matched])


def reference_exact(r, q, text, budget, limit):
    """The exact fusion of a small memory (every step ranked), as it was."""
    cos = (r.fitted_view.embeddings[:limit] @ q).astype(np.float64)
    bm = reference_neighbours(
        r._same, r.cfg.neighbour_weight, r.fitted_lexical.score_all(text, limit), limit
    )
    k = r.cfg.rrf_k
    dense = np.argsort(-cos, kind="stable")
    fused = np.empty(limit)
    fused[dense] = 1.0 / (k + np.arange(1, limit + 1, dtype=np.float64))
    lex = np.flatnonzero(bm > 0)
    lex = lex[np.lexsort((lex, -bm[lex]))]
    fused[lex] += 1.0 / (k + np.arange(1, lex.shape[0] + 1, dtype=np.float64))
    order = np.argsort(-fused, kind="stable").astype(np.int64)
    return pack_first_fit(order, r.fitted_view.costs, budget)


# --- data ------------------------------------------------------------------------------


#: Hand-made query texts beside the generated ones: common words only, a word every
#: step has, mixed case, unknown words, stop words only (no lexical ranking).
EXTRA = ["w31 w32 w33", "step", "topic3 STEP w40", "W31", "qqq zzz", "the of and"]


def _queries(data):
    """(query vector, query text) pairs: every generated query with its own text, then
    the hand-made texts with the first query vectors."""
    pairs = list(zip(data.queries, data.query_texts, strict=True))
    return pairs + list(zip(data.queries, EXTRA, strict=False))


@pytest.fixture(scope="module")
def memory():
    data = generate(3000, 32, 5, 40)
    return data


def _check_same(r, data, budgets, limits, reference):
    view = r.fitted_view
    n_compared = 0
    for qv, text in _queries(data):
        q = view.check_query(qv)
        for limit in limits:
            for budget in budgets:
                if not r.fitted_lexical.query_terms(text).shape[0]:
                    continue
                got = r._select_query(q, text, budget, limit, None)
                want = reference(r, q, text, budget, limit)
                np.testing.assert_array_equal(got, want, err_msg=f"{text!r} B={budget} {limit}")
                n_compared += 1
    return n_compared


@pytest.mark.parametrize("ann", [False, True], ids=["exact-scan", "hnsw-head"])
def test_large_memory_path_selects_what_the_dense_code_selected(memory, monkeypatch, ann):
    if ann:
        pytest.importorskip("hnswlib")
    monkeypatch.setattr(hybrid_module, "EXACT_FUSION_MAX", 256)
    r = create("osumem_hybrid", seed=3)
    r.ann_min_steps = 2000 if ann else 10**9
    r.fit(memory.view.prefix(2500))
    # incremental adds: the last steps sit in the lexical index's unmerged tail
    for end in (2501, 2600, 2999, 3000):
        r.update(memory.view.prefix(end))
    assert r.fitted_lexical._merged < r.fitted_lexical.n
    limits = [3000] if ann else [3000, 2999, 1700, 300]
    n = _check_same(r, memory, (1, 16, 64, 256, 1024, 8000), limits, reference_head_fused)
    assert n > 200


def test_small_memory_exact_fusion_is_unchanged(memory):
    r = create("osumem_hybrid", seed=1).fit(memory.view.prefix(1200))
    r.update(memory.view.prefix(1300))
    n = _check_same(r, memory, (16, 64, 256, 1024), [1300, 700, 2], reference_exact)
    assert n > 200


# --- the pieces ------------------------------------------------------------------------


def test_lexical_head_keeps_the_argpartition_choice_among_ties(memory):
    """The lexical top ``k`` as the dense code chose it (argpartition over every
    matched step in position order), ties at the ``k``-th score included."""
    r = create("osumem_hybrid", seed=0).fit(memory.view)
    n, tied = memory.view.n, 0
    for _, text in _queries(memory):
        bm = reference_neighbours(r._same, 0.5, r.fitted_lexical.score_all(text, n), n)
        matched = np.flatnonzero(bm)
        for k in (1, 5, 32, 128, 512):
            got = hybrid_module.lexical_head(matched, bm[matched], k)
            want = (
                matched[np.argpartition(-bm[matched], k - 1)[:k]] if matched.size > k else matched
            )
            want = want[np.lexsort((want, -bm[want]))]
            np.testing.assert_array_equal(got, want)
            if matched.size > k:
                kth = np.sort(bm[matched])[-k]
                tied += int(np.count_nonzero(bm[matched] == kth) > np.count_nonzero(bm[got] == kth))
    assert tied > 0  # steps tied at the k-th score were left out: the choice mattered


def test_matches_are_the_nonzero_dense_scores_bit_for_bit(memory):
    index = LexicalIndex()
    texts = list(memory.texts)
    index.add(texts[:1000])
    for lo in range(1000, 3000, 7):  # merged once past 1,024 new steps, then a tail
        index.add(texts[lo : lo + 7])
    assert 1000 < index._merged < index.n
    for _, text in _queries(memory):
        for limit in (index.n, index.n - 1, index._merged + 5, index._merged, 999, 1, 0):
            full = index.score_all(text, limit)
            docs, scores = index.matches(text, limit)
            nz = np.flatnonzero(full)
            np.testing.assert_array_equal(docs, nz)
            np.testing.assert_array_equal(scores, full[nz])  # exact, not close


@pytest.mark.parametrize("seed", range(6))
def test_sparse_neighbours_equal_the_dense_pass(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    texts = [""] * n
    # segments of random lengths, hits in runs and alone, at both ends
    subgoals = np.repeat(np.arange(n), rng.integers(1, 6, size=n))[:n].astype(str)
    view = MemoryView.build(
        rng.standard_normal((n, 8)).astype(np.float32),
        np.ones(n, dtype=np.int64),
        texts=texts,
        subgoals=subgoals.tolist(),
    )
    r = create("osumem_hybrid", seed=0).fit(view)
    for density in (0.02, 0.3, 0.9, 1.0):
        score = np.where(rng.random(n) < density, rng.random(n) + 0.1, 0.0)
        score[rng.integers(0, n, size=3)] = 1.5  # ties
        if seed % 2:
            score[0] = score[-1] = 2.0
        for limit in sorted({n, max(1, n - 1), max(1, n // 2), 1, 2} - {0}):
            if limit > n:
                continue
            part = score[:limit].copy()
            dense = reference_neighbours(r._same, 0.5, part.copy(), limit)
            hits = np.flatnonzero(part)
            got_pos, got = r._neighbours_sparse(hits, part[hits], limit)
            np.testing.assert_array_equal(got_pos, np.flatnonzero(dense))
            np.testing.assert_array_equal(got, dense[np.flatnonzero(dense)])


def test_incremental_adds_equal_a_rebuild(memory, monkeypatch):
    """An index grown one step at a time ranks like one built at once (same postings,
    scores equal up to the order of additions) and the hybrid selects the same."""
    monkeypatch.setattr(hybrid_module, "EXACT_FUSION_MAX", 256)
    view = memory.view
    grown = create("osumem_hybrid", seed=2).fit(view.prefix(2900))
    for end in range(2901, 3001):
        grown.update(view.prefix(end))
    built = create("osumem_hybrid", seed=2).fit(view)
    for _, text in _queries(memory):
        np.testing.assert_allclose(
            grown.fitted_lexical.score_all(text), built.fitted_lexical.score_all(text), rtol=1e-12
        )
    for qv, text in zip(memory.queries, memory.query_texts, strict=True):
        q = view.check_query(qv)
        for budget in (16, 256, 2048):
            np.testing.assert_array_equal(
                grown.retrieve(q, budget, text=text).positions,
                built.retrieve(q, budget, text=text).positions,
            )
