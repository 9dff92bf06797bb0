"""Cells on hand-built evidence sets and the metadata heuristic."""

from __future__ import annotations

import numpy as np
import pytest

from osumem.evaluate.cells import any_binding, cell_of
from osumem.evaluate.heuristic import predict_overlap_helps, verdict_from_cells
from osumem.types import Episode, MemoryView, Query

# step:      0          1          2          3          4
SIGS = ["get:a,b", "get:a,b", "put:x", "get:a,b", ""]
ENTS = [{"acct1", "nyc"}, {"acct1"}, {"nyc"}, {"bos"}, {"acct1", "nyc"}]


def _view() -> MemoryView:
    rng = np.random.default_rng(0)
    return MemoryView.build(
        rng.standard_normal((5, 4)), [10] * 5, tool_signatures=SIGS, entities=ENTS
    )


@pytest.mark.parametrize(
    ("evidence", "cell"),
    [
        ((0, 1), "T+E+"),  # same signature, share acct1
        ((0, 3), "T+E-"),  # same signature, {acct1,nyc} ∩ {bos} = ∅
        ((0, 2), "T-E+"),  # get vs put, share nyc
        ((2, 3), "T-E-"),  # nothing shared
        ((0, 1, 2), "T-E-"),  # pairs (1,2): {acct1} ∩ {nyc} = ∅ and put ≠ get
        ((0, 1, 4), "T-E+"),  # step 4 has no tool: T-; every pair shares acct1
        ((0,), "T-E-"),  # one step has no pair
    ],
)
def test_cells_on_hand_built_evidence(evidence: tuple[int, ...], cell: str) -> None:
    assert cell_of(_view(), evidence) == cell


def test_any_binding_marginal() -> None:
    assert [any_binding(c) for c in ("T+E+", "T+E-", "T-E+", "T-E-")] == [True, True, True, False]


def test_verdict_from_cells_by_hand() -> None:
    # 2 T+E+, 1 T-E+, 3 T-E-: π_T+ = 2/6, π_any = 3/6 = .5 → meets the 0.5 threshold
    v = verdict_from_cells(["T+E+", "T+E+", "T-E+", "T-E-", "T-E-", "T-E-"])
    assert v.n_queries == 6
    assert v.tool_share == pytest.approx(2 / 6)
    assert v.entity_share == pytest.approx(3 / 6)
    assert v.any_binding_share == pytest.approx(0.5)
    assert v.overlap_helps
    assert not verdict_from_cells(["T+E+", "T-E-", "T-E-"]).overlap_helps
    assert verdict_from_cells(["T+E+", "T-E-", "T-E-"], min_binding_share=0.3).overlap_helps
    assert "π_any" in v.to_markdown()


def test_verdict_from_episodes_uses_annotations_only() -> None:
    view = _view()
    q = np.ones(4, dtype=np.float32)
    queries = tuple(
        # the stored cell label is deliberately wrong: the heuristic recomputes it
        Query(qid=f"q{i}", vector=q, t=5, evidence=ev, cell="T+E+")
        for i, ev in enumerate([(0, 1), (2, 3), (0, 3), (0,)])
    )
    v = predict_overlap_helps([Episode(episode_id="e", view=view, queries=queries)])
    assert v.n_queries == 3  # the single-evidence query is left out
    assert v.cell_shares["T+E+"] == pytest.approx(1 / 3)
    assert v.cell_shares["T-E-"] == pytest.approx(1 / 3)
    assert v.any_binding_share == pytest.approx(2 / 3)
    assert v.overlap_helps


def test_synthetic_benchmark_is_entity_bound() -> None:
    from osumem.bench.synthetic import SyntheticConfig, generate

    eps = list(generate(SyntheticConfig(n_episodes=5), 1000))
    v = predict_overlap_helps(eps)
    # synthetic evidence shares its event's entity by construction (E+ for all)
    assert v.entity_share == 1.0 and v.overlap_helps
