"""``benchmarks/gc_walk.py``: on a small store, the first retrieve (its collections
and peak memory), the tracked objects, a full collection's time and an agent loop's
calls are reported."""

from __future__ import annotations

import sys

from script_helpers import load_script


def test_it_reports_the_collectors_walk_and_the_loop(tmp_path):
    script = load_script("benchmarks/gc_walk.py")
    try:
        result = script.run(steps=300, rounds=5, collections=2, work=tmp_path)
    finally:
        sys.modules.pop("gc_walk", None)
    assert result["tracked_after"] > 0 and result["rounds"] == 5
    assert result["first_retrieve_s"] > 0 and isinstance(result["scipy_sparse_imported"], bool)
    assert result["first_retrieve_collections"] >= 0
    assert result["read_s"] > 0 and result["read_cpu_s"] >= 0 and result["read_collections"] >= 0
    assert result["read_peak_mb"] is None or result["read_peak_mb"] >= 0
    assert result["first_retrieve_collections_ms"] >= 0
    peak = result["first_retrieve_peak_mb"]
    assert peak is None or peak >= 0
    assert ("peak resident memory +" in script.render(result)) == (peak is not None)
    assert 0 < result["full_collection_ms"]["min"] <= result["full_collection_ms"]["median"]
    assert result["calls_ms"]["max"] >= result["calls_ms"]["p50"] > 0
    assert script.render(result).startswith(f"a {result['steps']}-step memory")
    assert not (tmp_path / "copy.db").exists()
