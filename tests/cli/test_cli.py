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


def test_experiment_is_checked_before_any_data_is_read(tmp_path):
    """A bad method, budget or parameter fails at once, before data loading or
    encoding (the data path here does not even exist)."""
    missing = str(tmp_path / "missing.json")
    for args in (
        ["--methods", "flat,nope"],
        ["--budgets", "0,64"],
        ["--methods", "flat", "--set", "osumem.nope=1"],
    ):
        r = CliRunner().invoke(main, ["bench", "taubench", "--data", missing, *args])
        assert r.exit_code == 2, r.output
        assert "not found" not in r.output
