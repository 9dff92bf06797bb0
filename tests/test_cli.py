"""The command line, end to end on a small slice."""

import json

import pandas as pd
from click.testing import CliRunner

from osumem import __version__
from osumem.cli import main


def test_version_and_help():
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and __version__ in r.output
    r = CliRunner().invoke(main, ["bench", "synthetic", "--help"])
    assert r.exit_code == 0 and "--budgets" in r.output and "--set" in r.output


def test_bench_synthetic_json_and_rows(tmp_path):
    r = CliRunner().invoke(
        main,
        [
            "bench",
            "synthetic",
            "--methods",
            "flat,no_memory",
            "--budgets",
            "64,256",
            "--episodes",
            "6",
            "--jobs",
            "1",
            "--json",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert set(data) == {"flat", "no_memory"}
    assert set(data["flat"]) == {"64", "256"}
    assert data["no_memory"]["256"]["recall"] == 0.0
    assert data["flat"]["256"]["recall"] >= data["flat"]["64"]["recall"]
    rows = pd.read_parquet(tmp_path / "synthetic.parquet")
    for col in (
        "benchmark",
        "seed",
        "episode",
        "query",
        "method",
        "budget",
        "hit1",
        "hit2",
        "recall",
        "n_evidence",
        "cell",
        "latency_s",
    ):
        assert col in rows.columns
    assert (rows["cost"] <= rows["budget"]).all()
    n = data["flat"]["64"]["n"]
    assert len(rows) == n * 2 * 2


def test_unknown_method_is_a_clear_error():
    r = CliRunner().invoke(
        main, ["bench", "synthetic", "--methods", "flat,nope", "--episodes", "2"]
    )
    assert r.exit_code == 2
    assert "unknown method 'nope'" in r.output


def test_set_unknown_parameter_is_reported():
    r = CliRunner().invoke(
        main,
        [
            "bench",
            "synthetic",
            "--methods",
            "flat_mmr",
            "--episodes",
            "2",
            "--set",
            "flat_mmr.lam=1",
        ],
    )
    assert r.exit_code == 2 and "unknown parameter" in r.output
    r = CliRunner().invoke(
        main,
        ["bench", "synthetic", "--methods", "flat", "--episodes", "2", "--set", "synthetic.nope=1"],
    )
    assert r.exit_code == 2 and "nope" in r.output
