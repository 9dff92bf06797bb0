"""``benchmarks/serve_gc_pauses.py``: both servers run under the load on copies of one
store, and the collections each one made are read back from its log (the frozen
server's start always has one: the collection just before the freeze)."""

from __future__ import annotations

import sys

import pytest

from script_helpers import load_script

pytest.importorskip("uvicorn")


@pytest.mark.slow
def test_both_servers_are_loaded_and_their_collections_read(tmp_path):
    script = load_script("benchmarks/serve_gc_pauses.py")
    try:
        rows = script.run(steps=120, clients=2, ops=6, repeat=1, work=tmp_path)
    finally:
        sys.modules.pop("serve_gc_pauses", None)
    assert [r["variant"] for r in rows] == ["frozen", "not frozen"]
    for r in rows:
        assert r["errors"] == 0 and r["throughput_ops_s"] > 0
        assert r["full_collections_in_load"] >= 0 and r["longest_ms"] <= r["sum_ms"] + 1e-9
    assert rows[0]["start_collections_ms"]  # frozen_start's own collection
    assert "| 1 | not frozen |" in script.render(rows)
    assert sorted(p.name for p in tmp_path.glob("serve-*")) == []  # the copies removed
