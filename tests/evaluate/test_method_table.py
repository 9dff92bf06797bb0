"""The resolved method table written beside the rows, and the report reading it."""

from __future__ import annotations

from pathlib import Path

from osumem.bench.synthetic import SyntheticConfig, generate
from osumem.evaluate.methods import TABLE_KEY, method_table, read_method_table
from osumem.evaluate.runner import parse_method_runs, run, write_results
from osumem.report.build import ReportSettings, build_report
from osumem.retrieve.registry import parse_overrides


def test_table_records_overrides_full_parameters_and_oracles() -> None:
    runs = parse_method_runs(
        ["osumem", "osumem_disjoint", "osumem_gf", "flat"],
        parse_overrides(["osumem.max_memberships=3"]),
    )
    table = {d["label"]: d for d in method_table(runs)}
    # a --set override makes `osumem` a configuration the paper never reports
    assert table["osumem"]["params"]["max_memberships"] == 3 and table["osumem"]["alias"] is None
    assert table["osumem_disjoint"]["params"]["max_memberships"] == 1
    assert table["osumem_disjoint"]["alias"] == "osumem_disjoint"
    assert table["osumem_gf"]["is_oracle"] and not table["flat"]["is_oracle"]
    assert table["flat"]["method"] == "flat" and table["flat"]["params"] == {}
    assert set(table["osumem"]["params"]) >= {"gap", "novelty", "views", "max_memberships"}


def test_report_reads_the_table_instead_of_the_labels(tmp_path: Path) -> None:
    eps = [(0, ep) for ep in generate(SyntheticConfig(n_episodes=3), 0)]
    runs = parse_method_runs(["flat", "flat_mmr"])
    rows = run(eps, runs, [64, 128], benchmark="synthetic", jobs=1, progress=False)
    rows["method"] = rows["method"].replace({"flat_mmr": "mine"})
    table = method_table(runs)
    table[1] |= {"label": "mine", "alias": "osumem_disjoint", "is_oracle": True}
    write_results(tmp_path, rows, {TABLE_KEY: table}, name="synthetic")
    md = build_report(tmp_path, settings=ReportSettings(n_permutations=99)).read_text()
    # "mine" is no method spec: only the table can say what it was
    assert "mine (= osumem_disjoint) (oracle)" in md
    assert read_method_table({}, ["mine"])["mine"].display() == "mine"
