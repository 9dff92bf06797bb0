"""The lexical view (BM25 index), the bm25 / hybrid baselines and osumem_hybrid: scores
against a reference, incremental == batch, causality, state, bad input."""

import math
import random

import numpy as np
import pytest

from osumem.annotate import ENGLISH_STOP_WORDS
from osumem.bench.synthetic import SyntheticConfig, generate_episode
from osumem.embed import HashingEncoder
from osumem.memory import Memory
from osumem.retrieve import create
from osumem.retrieve.lexical import LexicalIndex, s_stem, tokenize
from osumem.types import MemoryView

WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "the", "of", "is"]
TEXT_METHODS = ["bm25", "hybrid", "osumem_hybrid"]


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12))) for _ in range(n)]


def _reference(texts: list[str], query: str, k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    docs = [tokenize(t) for t in texts]
    n = len(docs)
    avg = sum(map(len, docs)) / n
    out = np.zeros(n)
    for term in dict.fromkeys(tokenize(query)):
        df = sum(term in d for d in docs)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for j, d in enumerate(docs):
            tf = d.count(term)
            if tf:
                out[j] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avg))
    return out


def test_stop_words_are_scikit_learns_list():
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS as SKLEARN

    assert frozenset(SKLEARN) == ENGLISH_STOP_WORDS


def test_tokenize_scripts_identifiers_and_stop_words():
    assert tokenize("get_user_details(mia_li_3668)") == ["user", "details", "mia", "li", "3668"]
    assert tokenize("The and of, is!") == []
    assert tokenize("Привет, МИР") == ["привет", "мир"]
    assert tokenize("東京に") == ["東", "京", "に"]
    assert tokenize("   \n\t") == []
    assert [s_stem(w) for w in ("flies", "boxes", "cats", "glass", "bus", "cat")] == [
        "fly",
        "boxe",
        "cat",
        "glass",
        "bus",
        "cat",
    ]


@pytest.mark.parametrize("batch", [1, 7, 5000])
def test_scores_equal_the_reference_and_do_not_depend_on_batches(batch):
    texts = _texts(2600)
    index = LexicalIndex()
    for i in range(0, len(texts), batch):
        index.add(texts[i : i + batch])
    for query in ("alpha beta", "zeta eps eps", "theta", "nothing at all", "the of"):
        np.testing.assert_allclose(index.score_all(query), _reference(texts, query), atol=1e-12)
    # causal: a query at ``limit`` uses the statistics of the first ``limit`` steps only
    for limit in (1, 999, 1500, 2599):
        np.testing.assert_allclose(
            index.score_all("alpha gamma", limit), _reference(texts[:limit], "alpha gamma")
        )


def test_ranking_scores_and_state_round_trip():
    texts = _texts(1500, seed=3)
    index = LexicalIndex()
    index.add(texts)
    docs, scores = index.ranking("alpha delta")
    full = index.score_all("alpha delta")
    assert (scores > 0).all() and set(docs.tolist()) == set(np.flatnonzero(full > 0).tolist())
    assert (np.diff(scores) <= 0).all()
    np.testing.assert_array_equal(index.scores("alpha delta", docs[:5]), scores[:5])
    again = LexicalIndex.from_state(index.state())
    np.testing.assert_array_equal(again.score_all("alpha delta"), full)
    again.add(["alpha alpha"])
    index.add(["alpha alpha"])
    np.testing.assert_array_equal(again.score_all("alpha"), index.score_all("alpha"))
    prefix = index.copy_prefix(700)
    np.testing.assert_allclose(prefix.score_all("beta"), _reference(texts[:700], "beta"))


def test_damaged_state_is_refused():
    index = LexicalIndex()
    index.add(["alpha beta", "gamma"])
    state = index.state()
    bad = dict(state, doc_terms=np.asarray([0, 99, 1], dtype=np.int32))
    with pytest.raises(ValueError):
        LexicalIndex.from_state(bad)
    with pytest.raises(ValueError):
        LexicalIndex.from_state(dict(state, format=np.int64(99)))


def _view(texts: list[str], dim: int = 64) -> MemoryView:
    enc = HashingEncoder(dim)
    return MemoryView.build(
        enc.encode(texts),
        [max(1, len(t.split())) for t in texts],
        texts=texts,
        subgoals=[f"s{i // 5}" for i in range(len(texts))],
    )


@pytest.mark.parametrize("name", ["bm25", "hybrid"])
def test_without_text_the_lexical_baselines_are_flat(name):
    ep = generate_episode(SyntheticConfig(n_episodes=1), 3, 0)
    flat = create("flat").fit(ep.view)
    other = create(name).fit(ep.view)
    for q in ep.queries:
        for b in (16, 64, 256):
            a = flat.retrieve(q.vector, b).positions
            np.testing.assert_array_equal(other.retrieve(q.vector, b).positions, a)
            np.testing.assert_array_equal(other.retrieve(q.vector, b, text="").positions, a)


def test_osumem_hybrid_without_text_is_osumem_adaptive():
    ep = generate_episode(SyntheticConfig(n_episodes=1), 4, 0)
    a = create("osumem_adaptive", seed=2).fit(ep.view)
    h = create("osumem_hybrid", seed=2).fit(ep.view)
    for q in ep.queries:
        for b in (64, 256):
            np.testing.assert_array_equal(
                h.retrieve(q.vector, b).positions, a.retrieve(q.vector, b).positions
            )


def test_hybrid_is_reciprocal_rank_fusion():
    texts = _texts(300, seed=5)
    view = _view(texts)
    q = HashingEncoder(64).encode(["gamma delta"])[0]
    got = create("hybrid").fit(view).retrieve(q, 40, text="gamma delta").positions
    cos = view.embeddings @ q
    dense = np.argsort(-cos, kind="stable")
    bm = _reference(texts, "gamma delta")
    lex = sorted(np.flatnonzero(bm > 0), key=lambda i: (-bm[i], i))
    score = {int(d): 1 / (60 + r) for r, d in enumerate(dense, 1)}
    for r, d in enumerate(lex, 1):
        score[int(d)] += 1 / (60 + r)
    rank_of = {int(d): r for r, d in enumerate(dense)}
    order = sorted(score, key=lambda i: (-score[i], rank_of[i]))
    expect, left = [], 40
    for i in order:
        if view.costs[i] <= left:
            expect.append(i)
            left -= int(view.costs[i])
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("name", TEXT_METHODS)
@pytest.mark.parametrize("budget", [1, 9, 60, 10_000])
def test_text_queries_keep_budget_and_causality(name, budget):
    texts = _texts(200, seed=7)
    view = _view(texts)
    r = create(name, seed=1).fit(view.prefix(150))
    q = HashingEncoder(64).encode(["beta theta"])[0]
    sel = r.retrieve(q, budget, text="beta theta")
    assert sel.cost <= budget and (sel.positions < 150).all()
    assert np.unique(sel.positions).size == sel.positions.size
    sel2 = r.retrieve(q, budget, text="beta theta", before=40)
    assert (sel2.positions < 40).all() and sel2.cost <= budget
    # incremental == batch
    inc = create(name, seed=1).fit(view.prefix(120)).update(view.prefix(150))
    np.testing.assert_array_equal(
        inc.retrieve(q, budget, text="beta theta").positions, sel.positions
    )


@pytest.mark.parametrize("name", TEXT_METHODS)
def test_bad_text_input_through_the_memory(name):
    with Memory.open(None, encoder="hashing", method=name) as mem:
        mem.add_messages([{"role": "user", "content": ""}], namespace="a")
        mem.add_messages([{"role": "user", "content": "   \n "}], namespace="a")
        mem.add_messages(
            [{"role": "user", "content": "Мы забронировали рейс в Москву"}], namespace="a"
        )
        mem.add_messages([{"role": "user", "content": "東京行きの便を予約しました"}], namespace="a")
        mem.add_messages([{"role": "user", "content": "book flight HAT12 " * 5000}], namespace="a")
        mem.add_messages([{"role": "user", "content": "the weather is nice"}], namespace="a")
        assert len(mem.view("a").texts[4]) > 80_000
        for query in ("the of and is", "рейс Москву", "東京", "HAT12", "weather"):
            out = mem.retrieve(query, 100_000, namespace="a")
            assert out.cost <= 100_000 and len(out.steps) == 6
        # a small budget still ranks the matching step first
        assert mem.retrieve("рейс Москву", 8, namespace="a").steps[0].position == 2
        assert mem.retrieve("東京", 12, namespace="a").steps[0].position == 3
        assert mem.retrieve("weather nice", 6, namespace="a").steps[0].position == 5


@pytest.mark.parametrize("name", TEXT_METHODS)
def test_reopened_memory_restores_the_index_from_its_snapshot(tmp_path, name):
    path = tmp_path / "m.db"
    with Memory.open(path, encoder="hashing", method=name) as mem:
        for i in range(40):
            mem.add_messages(
                [{"role": "user", "content": f"I booked flight HAT{i} to city {i % 7}"}],
                namespace="a",
            )
        before = [s.position for s in mem.retrieve("flight HAT7 city", 64, namespace="a").steps]
    with Memory.open(path, encoder="hashing", method=name) as mem:
        calls = []
        cls = type(mem._retrievers.new())
        orig = cls.update

        def counting(self, view):
            calls.append(view.n)
            return orig(self, view)

        cls.update = counting
        try:
            after = [s.position for s in mem.retrieve("flight HAT7 city", 64, namespace="a").steps]
        finally:
            cls.update = orig
        assert mem._retrievers.snapshot_steps("a") == 40 and calls == []
    assert after == before


def test_lexical_scores_are_public():
    texts = ["alpha beta", "gamma", "alpha alpha"]
    r = create("bm25").fit(_view(texts))
    s = r.lexical_scores("alpha", [0, 1, 2])
    assert s[1] == 0 and s[2] > s[0] > 0
    h = create("osumem_hybrid").fit(_view(texts))
    assert h.lexical_scores("gamma", [1])[0] > 0
