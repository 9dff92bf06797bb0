"""Hit@k and Recall on hand-computed cases."""

import numpy as np
import pandas as pd

from conftest import make_view
from osumem.evaluate.cells import cell_of
from osumem.evaluate.metrics import recall_by_distance, score_query, summarise


def test_hits_and_recall_by_hand():
    sel = np.array([3, 7, 9])
    s = score_query(sel, (1, 3, 9, 12), t=20)  # found 3 and 9: 2 of 4
    assert (s.hit1, s.hit2, s.recall) == (1.0, 1.0, 0.5)
    assert s.ev_distance == (19, 17, 11, 8)
    assert s.ev_found == (False, True, True, False)
    s = score_query(sel, (3, 4), t=20)  # one of two
    assert (s.hit1, s.hit2, s.recall) == (1.0, 0.0, 0.5)
    s = score_query(np.array([], dtype=np.int64), (3, 4), t=20)
    assert (s.hit1, s.hit2, s.recall) == (0.0, 0.0, 0.0)
    s = score_query(np.array([3, 5]), (3, 3, 7), t=10)  # a repeated position counts once
    assert (s.hit1, s.hit2, s.recall, s.n_evidence) == (1.0, 0.0, 0.5, 2)


def test_summary_and_distance_buckets():
    rows = pd.DataFrame(
        {
            "method": ["m", "m"],
            "budget": [64, 64],
            "recall": [1.0, 0.5],
            "hit1": [1.0, 1.0],
            "hit2": [1.0, 0.0],
            "ev_distance": [[10, 60], [10, 250]],
            "ev_found": [[True, True], [True, False]],
        }
    )
    s = summarise(rows).iloc[0]
    assert (s.recall, s.hit1, s.hit2, s.n) == (0.75, 1.0, 0.5, 2)
    rb = recall_by_distance(rows).set_index("bucket")
    assert rb.loc["0-49", "recall"] == 1.0 and rb.loc["0-49", "n"] == 2
    assert rb.loc["50-99", "recall"] == 1.0
    assert rb.loc["200+", "recall"] == 0.0


def test_cells_from_annotations():
    v = make_view(
        4,
        tool_signatures=["a#1", "a#1", "b#1", ""],
        entities=[{"x", "y"}, {"y"}, {"z"}, {"x"}],
    )
    assert cell_of(v, (0, 1)) == "T+E+"
    assert cell_of(v, (0, 2)) == "T-E-"
    assert cell_of(v, (0, 3)) == "T-E+"
    assert cell_of(v, (1, 0, 2)) == "T-E-"


def test_metric_objects_carry_name_and_per_query_function():
    from osumem.evaluate.metrics import METRICS, Hit, Recall, metric_name

    assert list(METRICS) == ["recall", "hit1", "hit2"]
    assert [metric_name(k) for k in METRICS] == ["Recall", "Hit@1", "Hit@2"]
    assert Hit(3).of(2, 4) == 0.0 and Hit(3).of(3, 4) == 1.0 and Hit(3).key == "hit3"
    assert Recall.of(1, 4) == 0.25 and Recall.of(0, 0) == 0.0
    s = score_query(np.array([1, 2, 5]), (1, 2, 3), t=9)
    assert [getattr(s, k) for k in METRICS] == [m.of(2, 3) for m in METRICS.values()]
