"""`osumem bench compare` and the comparison it prints."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from osumem.cli import main
from osumem.errors import InvalidInputError
from osumem.evaluate.compare import ALL_CELLS, check_bar, compare_rows


def _rows(d_hit2: dict[str, list[int]], seeds=(0, 1), cells=("T+E+", "T-E-")) -> pd.DataFrame:
    """Rows of methods "a" and "flat": per seed, 8 episodes of 2 queries (one per cell)
    at B = 64; "a" gets hit2 = flat's + the given per-episode delta (0 or 1)."""
    out = []
    for seed in seeds:
        for e in range(8):
            for qi, cell in enumerate(cells):
                base = 0
                for method, delta in (("flat", 0), ("a", d_hit2[cell][e])):
                    out.append(
                        {
                            "benchmark": "toy",
                            "seed": seed,
                            "episode": f"ep{e}",
                            "query": f"q{qi}",
                            "method": method,
                            "budget": 64,
                            "hit2": float(base + delta),
                            "recall": float(base + delta) / 2,
                            "cell": cell,
                        }
                    )
    return pd.DataFrame(out)


def test_compare_rows_differences_cells_and_bar():
    # T+E+: "a" wins on every episode; T-E-: never differs.
    rows = _rows({"T+E+": [1] * 8, "T-E-": [0] * 8})
    report = compare_rows(rows, method="a", baselines=["flat"], n_permutations=2000)
    t = report.table.set_index(["cell", "metric"])
    assert set(report.table["cell"]) == {ALL_CELLS, "T+E+", "T-E-"}
    # all: half the queries gain 1 → +0.5 Hit@2, +0.25 Recall
    assert t.loc[(ALL_CELLS, "hit2"), "diff"] == pytest.approx(0.5)
    assert t.loc[(ALL_CELLS, "recall"), "diff"] == pytest.approx(0.25)
    assert t.loc[("T+E+", "hit2"), "diff"] == pytest.approx(1.0)
    assert t.loc[("T-E-", "hit2"), "diff"] == 0.0
    assert t.loc[("T-E-", "hit2"), "p"] == 1.0
    # 8 episodes all +1 per seed: exact sign-flip p = 2/256 per seed, Fisher over 2 seeds
    assert t.loc[("T+E+", "hit2"), "p"] < 0.01
    assert t.loc[(ALL_CELLS, "hit2"), "n_episodes"] == 16
    assert t.loc[(ALL_CELLS, "hit2"), "n_queries"] == 32
    assert check_bar(report) == []
    # the mirror image: "a" loses everywhere in T+E+ → the bar fails on both metrics
    worse = rows.copy()
    flip = worse["method"] == "a"
    worse.loc[flip, ["hit2", "recall"]] = -worse.loc[flip, ["hit2", "recall"]]
    fails = check_bar(compare_rows(worse, method="a", baselines=["flat"], n_permutations=2000))
    assert len(fails) == 2 and all("toy B=64" in f for f in fails)


def test_small_loss_not_significant_still_fails_the_one_point_rule():
    # one episode of 8 (per seed) loses one query: −1/32 ≈ −3 pp, not significant
    rows = _rows({"T+E+": [0] * 8, "T-E-": [0] * 8})
    mask = (rows["method"] == "a") & (rows["episode"] == "ep0") & (rows["cell"] == "T+E+")
    rows.loc[mask, "hit2"] = -1.0
    report = compare_rows(rows, method="a", baselines=["flat"], n_permutations=500)
    row = report.table.query("cell == 'all' and metric == 'hit2'").iloc[0]
    assert row["p"] > 0.05 and row["diff"] == pytest.approx(-2 / 32)
    assert any("Hit@2" in f for f in check_bar(report))


def test_compare_rows_unknown_method():
    rows = _rows({"T+E+": [0] * 8, "T-E-": [0] * 8})
    with pytest.raises(InvalidInputError, match="zzz"):
        compare_rows(rows, method="zzz", baselines=["flat"])


def test_bench_compare_cli_tiny_synthetic(tmp_path):
    args = [
        "bench",
        "compare",
        "--synthetic-seeds",
        "0,1",
        "--episodes",
        "2",
        "--budgets",
        "64,256",
        "--permutations",
        "200",
        "--quiet",
        "--out",
        str(tmp_path),
    ]
    res = CliRunner().invoke(main, [*args, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output[res.output.index("{") :])
    assert data["method"] == "osumem_adaptive"
    assert data["baselines"] == ["flat", "osumem", "osumem_disjoint"]
    rows = pd.DataFrame(data["rows"])
    assert set(rows["budget"]) == {64, 256}
    assert set(rows["baseline"]) == {"flat", "osumem", "osumem_disjoint"}
    assert np.isfinite(rows["p"]).all() and (rows["p"] <= 1).all()
    assert (tmp_path / "synthetic.parquet").exists() and (tmp_path / "compare.md").exists()
    # the written rows can be compared again without rerunning
    again = CliRunner().invoke(
        main, ["bench", "compare", "--rows", str(tmp_path), "--permutations", "200"]
    )
    assert again.exit_code == 0, again.output
    assert "| synthetic | 256 | all |" in again.output


def test_bench_compare_cli_unknown_method_is_one_line_error():
    res = CliRunner().invoke(main, ["bench", "compare", "--method", "nope"])
    assert res.exit_code == 2
    assert "nope" in res.output and "Traceback" not in res.output
