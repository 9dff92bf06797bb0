"""One experiment spec and one ``reproduce(spec)`` for every benchmark.

The recorded rows (``tests/data/golden_*``) were written by the three pipelines this
one replaced (same seeds, same small sizes); the refactor must reproduce them exactly
(timing columns aside).
"""

from __future__ import annotations

import io
import json
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from test_taubench import _tiny_file
from test_toolbench import _toolbench_data

from osumem.bench.reproduce import BENCHMARKS, load_spec, reproduce
from osumem.cli import main
from osumem.embed import HashingEncoder
from osumem.errors import ConfigError, DataFileError
from osumem.evaluate.runner import parse_method_runs, with_params
from osumem.report.experiment import load_experiments
from osumem.report.results_md import headings, results_markdown

GOLDEN = Path(__file__).resolve().parents[1] / "data"
TIMING = ["latency_s", "build_share_s", "build_s"]


def _csv(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` through CSV, so it compares like for like with a recorded CSV."""
    return pd.read_csv(io.StringIO(df.to_csv(index=False)))


def _rows(out: Path, names: list[str]) -> pd.DataFrame:
    frames = [
        pd.read_parquet(out / f"{n}.parquet").drop(columns=TIMING).assign(file=n) for n in names
    ]
    return _csv(pd.concat(frames, ignore_index=True))


def _golden(name: str) -> pd.DataFrame:
    """Rows recorded from the pipelines before ``reproduce(spec)``. The tau-bench rows of
    ``osumem_adaptive`` were recorded before its second version and are kept under
    ``osumem_adaptive_v1``, the name of those parameters now."""
    return pd.read_csv(GOLDEN / f"golden_{name}.csv.gz")


#: Methods whose rows are not in the recording, with why (a method added to an
#: experiment since, e.g. a newly registered method under ``ALL``). Each method's rows
#: do not depend on the others, so leaving these out compares the rest exactly; any
#: other method without recorded rows fails the test.
NOT_RECORDED: dict[str, str] = {
    "osumem_adaptive": "its second version came after the recording; the recorded rows "
    "of the first are compared under osumem_adaptive_v1",
    "osumem_paper": "registered after the recording (osumem with the paper's parameters pinned)",
    "bm25": "registered after the recording (a lexical baseline)",
    "hybrid": "registered after the recording (a lexical baseline)",
    "osumem_hybrid": "registered after the recording (OSU-Mem with a lexical side)",
}


def _assert_recorded(got: pd.DataFrame, name: str) -> None:
    """``got`` holds the recorded rows exactly, and nothing but them except the rows
    of :data:`NOT_RECORDED` methods (named in the test output)."""
    want = _golden(name)
    pairs = set(zip(want["file"], want["method"], strict=True))
    extra = sorted(
        {m for p in zip(got["file"], got["method"], strict=True) if p not in pairs for m in [p[1]]}
    )
    unexplained = [m for m in extra if m not in NOT_RECORDED]
    assert not unexplained, (
        f"{name}: rows of {unexplained} are not in tests/data/golden_{name}.csv.gz; "
        "record them or list the methods in NOT_RECORDED with the reason"
    )
    for method in extra:  # said in the test report's warnings summary
        warnings.warn(
            f"{name}: rows of {method!r} not compared: {NOT_RECORDED[method]}", stacklevel=2
        )
    keep = [p in pairs for p in zip(got["file"], got["method"], strict=True)]
    pd.testing.assert_frame_equal(got[keep].reset_index(drop=True), want)


def _same_metadata_shape(out: Path) -> None:
    keys = {
        tuple(json.loads(p.read_text()))
        for p in out.glob("*.json")
        if p.stem not in ("experiments", "timings", "spec")
    }
    assert len(keys) == 1, keys  # one shape for every row file
    assert "method_table" in next(iter(keys))


def test_every_benchmark_has_a_shipped_spec() -> None:
    for bench in BENCHMARKS:
        spec = load_spec(bench)
        assert spec.experiments and all(e.benchmark == bench for e in spec.experiments)
        for e in spec.experiments:
            parse_method_runs(list(e.run_methods()))  # every method resolves
    tool = load_spec("toolbench")
    roles = {e.role for e in tool.experiments}
    assert {"main", "beta_sweep", "evidence_sweep", "sensitivity"} <= roles
    beta = next(e for e in tool.experiments if e.role == "beta_sweep")
    assert beta.run_methods()[:2] == (
        "osumem_coverage[beta=0.04]",
        "osumem_coverage_disjoint[beta=0.04]",
    )
    tau = load_spec("taubench")
    assert {e.row_file for e in tau.experiments} == {
        "taubench",
        "taubench_weak",
        "taubench_noisenorm",
        "taubench_stage_d",
        "taubench_noprefix",
        "taubench_obs200",
    }


def test_two_method_params_make_one_readable_spec() -> None:
    """A sensitivity run with two parameters used to fail (',' instead of ';')."""
    spec = with_params("osumem_coverage", {"gap": 16, "similarity_scope": "all"})
    assert spec == "osumem_coverage[gap=16;similarity_scope=all]"
    (run,) = parse_method_runs([spec])
    assert run.params["gap"] == "16" and run.params["similarity_scope"] == "all"
    assert with_params("osumem[novelty=false]", {"gap": 8}) == "osumem[novelty=false;gap=8]"


def test_spec_problems_are_reported_before_anything_runs(tmp_path: Path) -> None:
    f = tmp_path / "two_synthetic.toml"
    f.write_text(
        """
[[experiment]]
name = "a"
kind = "comparison"
benchmark = "synthetic"
budgets = [64]
methods = ["flat"]
seeds = [0]

[[experiment]]
name = "b"
kind = "comparison"
benchmark = "synthetic"
budgets = [64]
methods = ["flat"]
seeds = [1]
analysis = "nonsense"
grid = { beta = [] }
"""
    )
    with pytest.raises(ConfigError) as err:
        load_experiments([f])
    assert "analysis must be one of" in str(err.value)
    assert "grid.beta" in str(err.value)
    f.write_text(f.read_text().replace('analysis = "nonsense"\ngrid = { beta = [] }\n', ""))
    spec = load_spec("synthetic", [f])
    assert [e.name for e in spec.experiments] == ["a", "b"]
    with pytest.raises(ConfigError, match="disagree on seeds"):
        reproduce(spec, out=tmp_path / "o", jobs=1, progress=False)
    assert not (tmp_path / "o").exists()
    for bench in ("taubench", "toolbench"):  # no data: nothing written
        with pytest.raises(DataFileError, match="data not found"):
            reproduce(load_spec(bench), data=tmp_path / "nope", out=tmp_path / "o2")
        assert not (tmp_path / "o2").exists()
    main = next(e for e in load_spec("toolbench").experiments if e.role == "main")
    with pytest.raises(ConfigError, match="toolbench"):
        load_spec("synthetic", [Path(main.source)])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three benchmarks reproduced small (the sizes the recorded rows were made
    at), once for the tests of this module."""
    root = tmp_path_factory.mktemp("reproduce")
    out = {b: root / b for b in BENCHMARKS}
    out["synthetic_info"] = Path(
        reproduce(load_spec("synthetic", episodes=2), out=out["synthetic"], jobs=1, progress=False)[
            "report"
        ]
    )
    tau = load_spec(
        "taubench",
        encoder="hashing",
        n_permutations=99,
        benchmark_params={
            "n_episodes": 2,
            "min_steps": 60,
            "max_steps": 100,
            "min_query_distance": 30,
        },
    )
    (root / "tau_data").mkdir()
    reproduce(tau, data=_tiny_file(root / "tau_data"), out=out["taubench"], jobs=1, progress=False)
    tool = load_spec(
        "toolbench",
        seeds=(1, 2),
        episodes=3,
        sweep_episodes=2,
        benchmark_params={"background_size": 40, "n_neighbors": 5},
    )
    reproduce(
        tool,
        data=_toolbench_data(root),
        out=out["toolbench"],
        jobs=1,
        progress=False,
        encoder=HashingEncoder(32),
    )
    return out


@pytest.mark.slow  # the three small reproductions (module fixture)
def test_reproduce_synthetic_rows_are_the_recorded_ones(runs: dict[str, Path]) -> None:
    out = runs["synthetic"]
    _assert_recorded(_rows(out, ["synthetic"]), "synthetic")
    for kind in ("reach", "membership"):
        got = _csv(pd.read_parquet(out / "analysis" / f"synthetic_{kind}.parquet"))
        pd.testing.assert_frame_equal(got, _golden(f"synthetic_{kind}"))
    assert (out / "efficiency.csv").exists()
    assert runs["synthetic_info"] == out / "report.md"
    assert "Table 2" in (out / "report.md").read_text()
    _same_metadata_shape(out)


@pytest.mark.slow
def test_reproduce_taubench_rows_and_summary_are_the_recorded_ones(runs: dict[str, Path]) -> None:
    out = runs["taubench"]
    names = list(dict.fromkeys(_golden("taubench")["file"]))
    _assert_recorded(_rows(out, names), "taubench")
    summary = (out / "taubench_summary.md").read_text()
    assert summary == (GOLDEN / "golden_taubench_summary.md").read_text()
    assert (out / "report.md").read_text().rstrip().endswith(summary.rstrip())
    _same_metadata_shape(out)


@pytest.mark.slow
def test_reproduce_toolbench_rows_and_summary_are_the_recorded_ones(runs: dict[str, Path]) -> None:
    out = runs["toolbench"]
    names = list(dict.fromkeys(_golden("toolbench")["file"]))
    assert sorted(p.stem for p in out.glob("toolbench*.parquet")) == names
    _assert_recorded(_rows(out, names), "toolbench")
    summary = (out / "toolbench_summary.md").read_text()
    assert summary == (GOLDEN / "golden_toolbench_summary.md").read_text()
    assert "SENSITIVITY (not used to pick defaults)" in summary
    recorded = json.loads((out / "spec.json").read_text())
    assert recorded["seeds"] == [1, 2] and recorded["sweep_episodes"] == 2
    assert "+6.2" in summary and "(2.16)" in summary  # the paper's numbers beside ours
    assert (out / "report.md").read_text().rstrip().endswith(summary.rstrip())
    _same_metadata_shape(out)


def _sensitivity() -> list:
    return [e for e in load_spec("toolbench").experiments if e.role == "sensitivity"]


def _structure(md: str) -> list[str]:
    """Headings with numbers blanked (sizes differ between a small and a full run)."""
    return [re.sub(r"\d+", "N", h) for h in headings(md)]


@pytest.mark.slow
def test_results_page_is_generated_from_the_runs(runs: dict[str, Path], tmp_path: Path) -> None:
    dirs = [runs[b] for b in ("toolbench", "synthetic", "taubench")]  # any order
    page = results_markdown(dirs)
    heads = headings(page)
    assert heads[:2] == ["# Results: ours beside the paper's", "## Synthetic"]
    assert heads.index("## Synthetic") < heads.index("## tau-bench") < heads.index("## ToolBench")
    assert "### Table 2 — synthetic benchmark, every method at the primary budget" in heads
    tool_out = runs["toolbench"].as_posix()  # the directory given, not a fixed runs/<bench>
    assert f"`osumem reproduce toolbench --data toolbench_data --out {tool_out}" in page
    assert "--out runs/" not in page
    assert "![" not in page  # figures stay beside each report
    # the numbers are the runs' own: the ToolBench summary's gap table is in the page
    summary = (runs["toolbench"] / "toolbench_summary.md").read_text()
    gap_row = next(line for line in summary.splitlines() if line.startswith("| 200 |"))
    assert gap_row in page
    assert _structure(page) == [
        "# Results: ours beside the paper's",
        "## Synthetic",
        "### Table N — synthetic benchmark, every method at the primary budget",
        "### Budget sweep — synthetic benchmark, B = N … N",
        "### Ablation grid (Appendix B.N) — synthetic benchmark",
        "### Ablations — synthetic benchmark",
        "### M_max sweep — synthetic benchmark",
        "### Reachability (Propositions N.N/N.N), overlap vs disjoint",
        "### Evidence-OSU membership, overlap vs disjoint",
        "### Efficiency",
        "## tau-bench",
        "## ToolBench",
        "### Overlap − disjoint (coverage-guided, β = .N), beside the paper",
        "### All methods (Recall / Hit@N)",
        "### Evidence-OSU membership (paper in parentheses)",
        "### β sweep (N episodes per seed; overlap − disjoint)",
        "### Evidence-size sweep (N episodes per seed; overlap − disjoint)",
        *_structure(
            "\n".join(
                "### SENSITIVITY (not used to pick defaults): " + e.title for e in _sensitivity()
            )
        ),
    ]
    # the command writes the same page, and refuses a directory it did not write
    target = tmp_path / "results.md"
    res = CliRunner().invoke(main, ["results", *map(str, dirs), "--out", str(target)])
    assert res.exit_code == 0, res.output
    assert target.read_text() == page
    res = CliRunner().invoke(main, ["results", str(tmp_path)])
    assert res.exit_code == 2 and "spec.json" in res.output
