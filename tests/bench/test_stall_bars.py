"""``benchmarks/stall_bars.py``: each bar's verdict from its command's own output, at
the issue's thresholds (the commands themselves are the benchmarks' and the
scripts'; their outputs here are made up to sit on either side of a bar)."""

from __future__ import annotations

import sys

import pytest

from script_helpers import load_script


@pytest.fixture(scope="module")
def bars():
    yield load_script("benchmarks/stall_bars.py")
    sys.modules.pop("stall_bars", None)


def _pct(p50: float, p99: float, mx: float) -> dict:
    return {"p50_ms": p50, "p99_ms": p99, "max_ms": mx, "mean_ms": p50, "rounds": 1000}


def _scale(p99: float, mx: float, p50: float, ratio: float) -> dict:
    rows = [{"n": 100000, "method": "ann_hnsw", "retrieve": _pct(0.1, 0.2, 0.3)}]
    ratios = []
    for method in ("osumem", "osumem_adaptive"):
        rows.append(
            {
                "n": 100000,
                "method": method,
                "retrieve": _pct(p50, 1.0, 2.0),
                "agent_step": _pct(0.5, p99, mx),
                "agent_step_wall": _pct(0.5, p99, mx),
            }
        )
        ratios.append({"n": 100000, "method": method, "retrieve_p50_over_ann": ratio})
    return {"rows": rows, "ratios": ratios}


def test_scale_bars_at_their_thresholds(bars):
    met = [v[2] for v in bars.scale_verdicts(_scale(10.0, 50.0, 0.2, 2.0))]
    assert met == [True] * 6
    missed = [v[2] for v in bars.scale_verdicts(_scale(10.01, 50.01, 0.2, 2.01))]
    assert missed == [False] * 6


def test_the_other_bars_at_their_thresholds(bars):
    bulk = {
        "rows": [
            {"n": 50000, "method": m, "texts": "tau-bench", "ingest_cpu_s": 9.0,
             "first_retrieve_cpu_s": cpu, "first_retrieve_wall_s": 0.1}
            for m, cpu in (("bulk Memory[osumem, hashing]", 1.0), ("bulk Memory[x]", 1.2))
        ]
    }  # fmt: skip
    assert [v[2] for v in bars.bulk_verdicts(bulk)] == [True, False]
    serve = {"concurrent": {"throughput_ops_s": 500.0}, "echo": {"throughput_ops_s": 1000.0}}
    assert bars.serve_verdicts(serve | {"echo": serve["echo"] | {"ratio": 0.5}})[0][2]
    assert not bars.serve_verdicts(serve | {"echo": serve["echo"] | {"ratio": 0.49}})[0][2]
    add = {"add_cpu": {"p50_ms": 0.4}, "floor_cpu": {"p50_ms": 0.2}, "statements_p50_ratio": 1.5}
    assert bars.add_verdicts(add | {"p50_ratio": 2.0})[0][2]
    assert not bars.add_verdicts(add | {"p50_ratio": 2.01})[0][2]
    cold = {"query": {"cpu_ms": 1, "wall_ms": 1}, "numpy": {"cpu_ms": 1, "wall_ms": 1}, "runs": 9}
    assert bars.cold_verdicts(cold | {"ratio_cpu": 1.1, "ratio_wall": 2.0})[0][2]
    assert not bars.cold_verdicts(cold | {"ratio_cpu": 1.1, "ratio_wall": 2.01})[0][2]

    def recall(mean: float) -> dict:
        row = {"answers": 100, "mean": mean, "min": 0.5}
        return {"64": {"all": row, "without_safeguard": row}}

    got = bars.recall_verdicts(
        {"clustered": recall(0.95), "gaussian": recall(0.949), "repeated": recall(0.96)}
    )
    assert [v[2] for v in got] == [True, False, True]


def test_the_bulk_bar_needs_a_file_and_groups_are_checked(bars, tmp_path, capsys):
    verdicts, raw = bars.run_group("bulk", tmp_path, None)
    assert raw is None and verdicts[0][1] == "not run: needs --bulk-file" and not verdicts[0][2]
    # a command that fails is a failed row, and the run goes on
    bars.GROUPS["broken"] = (
        lambda out, bulk: [sys.executable, "-c", "raise SystemExit(3)"],
        None,
        bars.cold_verdicts,
    )
    try:
        verdicts, raw = bars.run_group("broken", tmp_path, None)
    finally:
        del bars.GROUPS["broken"]
    assert verdicts == [
        ("broken: every bar of the group", "the command failed (exit 3): (no output)", False)
    ]
    sys_argv = sys.argv
    sys.argv = ["stall_bars.py", "--only", "scale,nonsense"]
    try:
        with pytest.raises(SystemExit):
            bars.main()
    finally:
        sys.argv = sys_argv
    assert "unknown group(s) nonsense" in capsys.readouterr().err
