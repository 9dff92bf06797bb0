"""Experiment configs, paper numbers, and the report built from a small results dir."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import synthetic_results
from osumem.cli import main
from osumem.errors import ConfigError
from osumem.report.build import ReportSettings, build_report, paper_benchmark, primary_budget
from osumem.report.experiment import load_experiments, shipped_experiments
from osumem.report.paper import PAPER, paper_cell, paper_value
from osumem.report.tables import summary_table

GOOD = """
[experiment]
name = "t"
kind = "comparison"
benchmark = "synthetic"
budgets = [64, 128]
primary_budget = 128
reference = "flat"
methods = ["flat", "flat_mmr"]
"""


def test_repository_configs_load() -> None:
    exps = load_experiments(shipped_experiments("synthetic"))
    names = {e.name for e in exps}
    assert {"table2", "budget_sweep", "ablations", "mmax_sweep", "efficiency"} <= names
    table2 = next(e for e in exps if e.name == "table2")
    assert table2.primary_budget == 256 and table2.reference == "osumem"
    assert table2.budgets == (64, 128, 256, 512)


def test_loader_reports_every_problem_at_once(tmp_path: Path) -> None:
    bad = tmp_path / "bad_synthetic.toml"
    bad.write_text(
        GOOD.replace("primary_budget = 128", 'primary_budget = 256\ncolour = "red"').replace(
            '"flat_mmr"', '"no_such_method"'
        )
    )
    also = tmp_path / "also_synthetic.toml"
    also.write_text("[experiment]\nname = 'x'\n")
    with pytest.raises(ConfigError) as err:
        load_experiments([bad, also, tmp_path / "missing.toml"])
    msg = str(err.value)
    assert "colour" in msg  # unknown key
    assert "missing required key 'kind'" in msg  # second file
    assert "no such file" in msg  # third file
    # each problem of the first file is reported even though the unknown key comes first
    assert msg.count("bad_synthetic.toml") >= 1


def test_loader_checks_methods_budgets_reference(tmp_path: Path) -> None:
    f = tmp_path / "x_synthetic.toml"
    f.write_text(
        GOOD.replace("primary_budget = 128", "primary_budget = 256")
        .replace('reference = "flat"', 'reference = "tree_x"')
        .replace('"flat_mmr"', '"no_such_method"')
    )
    with pytest.raises(ConfigError) as err:
        load_experiments([f])
    msg = str(err.value)
    assert "primary_budget 256" in msg
    assert "no_such_method" in msg
    assert "reference 'tree_x'" in msg


def test_paper_numbers() -> None:
    assert paper_value("synthetic", "osumem", 256, "recall") == 0.221
    assert paper_value("synthetic", "flat_mmr", 256, "hit2") == 0.052
    assert paper_value("taubench", "T-E-", 512, "hit2_gap") == -0.364
    assert paper_value("synthetic", "flat", 256, "recall") is None
    assert paper_cell("synthetic", "flat", 256, "recall") == "–"
    assert paper_cell("efficiency-64", "osumem", None, "amortised_ms", ".1f") == "8.3"
    assert all(isinstance(v, float) for v in PAPER.values())
    assert paper_benchmark("taubench_stage_d") == "taubench_staged"
    assert paper_benchmark("toolbench") == "toolbench"
    # sweeps and sensitivity runs get no paper numbers, but keep the primary budget
    assert paper_benchmark("toolbench_k2") == "toolbench_k2"
    assert paper_benchmark("taubench_obs200") == "taubench_obs200"
    assert primary_budget("toolbench_sens_prefix_on", [200, 400, 800]) == 400
    assert primary_budget("toolbench", [200, 400, 800]) == 400
    assert primary_budget("synthetic", [64, 128]) == 128


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_results(
        tmp_path_factory.mktemp("res"), ["flat", "flat_mmr", "no_memory"], n_episodes=6, seed=1000
    )


def test_report_sections_and_paper_numbers(results: Path) -> None:
    path = build_report(results, settings=ReportSettings(reference="flat", n_permutations=499))
    md = path.read_text()
    assert "### All methods at B = 256 (reference flat)" in md
    # Flat + MMR's paper numbers beside ours at B = 256
    line = next(ln for ln in md.splitlines() if ln.startswith("| flat_mmr |"))
    assert "0.158" in line and "0.052" in line
    assert "### Budget sweep" in md
    assert "### Recall by temporal distance" in md
    assert "### Cells and the metadata heuristic" in md
    assert "Cross-tab" in md  # reference flat vs baseline flat: both present
    assert (results / "figures" / "synthetic_distance.png").stat().st_size > 1000
    assert (results / "figures" / "synthetic_curves.png").exists()
    assert "Overlap vs disjoint" not in md  # its methods have no rows


def test_report_numbers_match_rows(results: Path) -> None:
    rows = pd.read_parquet(results / "synthetic.parquet")
    md = build_report(results, settings=ReportSettings(reference="flat", n_permutations=99))
    mean = rows[(rows["method"] == "flat") & (rows["budget"] == 256)]["recall"].mean()
    line = next(ln for ln in md.read_text().splitlines() if ln.startswith("| **flat** |"))
    assert f"{mean:.3f}" in line


def test_cli_report_and_missing_dir(results: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(
        main, ["report", str(results), "--reference", "flat", "--permutations", "99"]
    )
    assert res.exit_code == 0, res.output
    assert "report written" in res.output
    empty = tmp_path / "empty"
    empty.mkdir()
    res = runner.invoke(main, ["report", str(empty)])
    assert res.exit_code == 2


def test_reproduce_is_a_group_and_rejects_bad_configs(tmp_path: Path) -> None:
    bad = tmp_path / "t_synthetic.toml"
    bad.write_text(GOOD.replace('"flat_mmr"', '"no_such_method"'))
    res = CliRunner().invoke(
        main, ["reproduce", "synthetic", "--out", str(tmp_path / "o"), "--configs", str(bad)]
    )
    assert res.exit_code == 2
    assert "no_such_method" in res.output
    assert not (tmp_path / "o" / "synthetic.parquet").exists()


def test_summary_table_still_works(results: Path) -> None:
    rows = pd.read_parquet(results / "synthetic.parquet")
    assert "flat_mmr" in summary_table(rows)
