"""The retriever state protocol (``state_key`` / ``state`` / ``load_state``): a
fitted structure handed over, shared or as arrays, answers exactly as a fresh fit; and
nothing outside ``retrieve/`` and ``osu/`` needs the pool retrievers' private names
(import-linter cannot see attribute use, so this scans the source)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import make_view
from osumem.errors import InvalidInputError, NotFittedError
from osumem.retrieve import RetrieverState, available, create

SRC = Path(__file__).resolve().parents[2] / "src" / "osumem"
#: The private names of the pool retrievers' internals.
PRIVATE = re.compile(r"\b_PoolRetriever\b|\bpool_\b")


def test_private_pool_names_stay_inside_retrieve_and_osu():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts[0] in ("retrieve", "osu"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, found


def _view(n: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    return make_view(
        n,
        8,
        embeddings=rng.standard_normal((n, 8)),
        costs=rng.integers(1, 30, n).tolist(),
        entities=[frozenset({f"e{k % 5}", f"e{k % 7}"}) for k in range(n)],
        tool_signatures=[f"t{k % 3}" for k in range(n)],
        subgoals=[f"sg{k // 6}" for k in range(n)],
    )


@pytest.mark.parametrize("method", ["osumem", "osumem_coverage", "osumem_adaptive"])
def test_state_shared_or_as_arrays_answers_as_a_fresh_fit(method):
    view = _view()
    fitted = create(method, seed=3).fit(view)
    state = fitted.state()
    assert isinstance(state, RetrieverState) and state.n_steps == view.n
    assert state.key == fitted.state_key()
    shared = create(method, seed=3).load_state(view, state)
    assert shared.osu_pool() is fitted.osu_pool()  # shared, not copied
    assert "entity" in set(fitted.osu_pool().view_names())
    copied = create(method, seed=3).load_state(view, state.arrays())
    assert copied.osu_pool() is not fitted.osu_pool()
    rng = np.random.default_rng(1)
    for _ in range(5):
        q = rng.standard_normal(8)
        for budget in (20, 90, 400):
            want = fitted.retrieve(q, budget).positions.tolist()
            assert shared.retrieve(q, budget).positions.tolist() == want
            assert copied.retrieve(q, budget).positions.tolist() == want


def test_methods_that_build_the_same_pool_share_a_key():
    assert create("osumem").state_key() == create("osumem_coverage").state_key()
    assert create("osumem").state_key() != create("osumem_disjoint").state_key()


def test_methods_without_shared_state_say_so_and_snapshot_what_they_keep():
    view = _view(12)
    q = np.random.default_rng(3).standard_normal(8)
    for name in available():
        r = create(name)
        if r.state_key() is not None:
            continue
        assert r.osu_pool() is None
        r.fit(view)
        with pytest.raises(InvalidInputError, match="state"):
            r.state()
        if r.state_format() is None:  # keeps nothing a snapshot could restore
            with pytest.raises(InvalidInputError, match="keeps no state"):
                r.load_state(view, {})
            continue
        again = create(name).load_state(view, r.state_arrays())  # e.g. a lexical index
        for budget in (15, 60):
            assert again.retrieve(q, budget).positions.tolist() == (
                r.retrieve(q, budget).positions.tolist()
            )


def test_state_checks():
    with pytest.raises(NotFittedError, match="call fit"):
        create("osumem").state()
    with pytest.raises(NotFittedError, match="call fit"):
        create("flat").retrieve(np.ones(8), 10)
    view = _view()
    state = create("osumem").fit(view).state()
    with pytest.raises(InvalidInputError, match="other settings"):
        create("osumem_disjoint").load_state(view, state)
    arrays = state.arrays()
    with pytest.raises(ValueError):
        create("osumem").load_state(_view(40), arrays)  # covers 60 steps, not 40
    arrays["meta"] = arrays["meta"][:3]
    with pytest.raises(ValueError):
        create("osumem").load_state(view, arrays)
