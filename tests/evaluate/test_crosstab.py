"""The cell cross-tab and interaction table on a small hand-made row set."""

from __future__ import annotations

import pandas as pd
import pytest

from osumem.bench.taubench_report import summary_markdown
from osumem.errors import InvalidInputError
from osumem.evaluate.crosstab import crosstab, interaction

# per query: cell, osumem hit2, flat hit2 (the same at both budgets)
QUERIES = [
    ("T+E+", 1, 0),
    ("T+E+", 1, 0),
    ("T+E+", 1, 0),
    ("T+E+", 1, 0),
    ("T-E-", 0, 1),
    ("T-E-", 0, 0),
    ("T-E-", 0, 0),
]


def rows(budgets=(64, 256), benchmark="taubench") -> pd.DataFrame:
    out = []
    for b in budgets:
        for k, (cell, osu, flat) in enumerate(QUERIES):
            for method, hit in (("osumem", osu), ("flat", flat)):
                out.append(
                    {
                        "benchmark": benchmark,
                        "seed": 0,
                        "episode": f"e{k // 2}",
                        "query": f"q{k}",
                        "method": method,
                        "budget": b,
                        "hit2": float(hit),
                        "recall": hit / 2,
                        "cell": cell,
                    }
                )
    return pd.DataFrame(out)


def test_crosstab_per_cell_and_budget() -> None:
    ct = crosstab(rows(), metrics=("hit2",))
    assert list(ct["cell"]) == ["T+E+", "T+E+", "T-E-", "T-E-"]
    assert list(ct["budget"]) == [64, 256, 64, 256]
    top = ct.iloc[0]
    assert (top["n"], top["method_mean"], top["baseline_mean"], top["diff"]) == (4, 1, 0, 1)
    # exact sign-flip test, n = 4: only the all-plus and all-minus vectors reach |mean| = 1
    assert top["p"] == pytest.approx(2 / 16)
    low = ct.iloc[2]
    assert low["n"] == 3 and low["diff"] == pytest.approx(-1 / 3)
    assert low["p"] == pytest.approx(1.0)  # d = (-1, 0, 0): every flip ties
    rec = crosstab(rows(), metrics=("recall",))
    assert rec["diff"].iloc[0] == pytest.approx(0.5)


def test_interaction_statistic_and_p() -> None:
    it = interaction(rows(), metrics=("hit2",), n_permutations=999)
    # cell means 1 (n = 4) and -1/3 (n = 3), grand mean 3/7
    spread = 4 / 7 * (1 - 3 / 7) ** 2 + 3 / 7 * (-1 / 3 - 3 / 7) ** 2
    assert it["statistic"].tolist() == pytest.approx([spread, spread])
    # the within-cell residuals (only T-E-) can never spread the cells that far
    assert it["p"].tolist() == pytest.approx([1 / 1000, 1 / 1000])
    assert it["n"].tolist() == [7, 7] and it["n_cells"].tolist() == [2, 2]


def test_missing_method_is_an_error() -> None:
    with pytest.raises(InvalidInputError, match="tree"):
        crosstab(rows(), method="tree")


def test_summary_puts_paper_numbers_beside_ours(tmp_path) -> None:
    rows(budgets=(64, 128, 256, 512)).to_parquet(tmp_path / "taubench.parquet")
    text = summary_markdown(tmp_path, n_permutations=99)
    line = next(x for x in text.splitlines() if x.startswith("| T+E+ | hit2"))
    assert "+1.000 (.125) [+.161]" in line and "[+.232]" in line
    assert "[.002]" in text  # the paper's interaction p at B = 256


def test_reproduce_taubench_is_registered() -> None:
    import click

    from osumem.cli import main

    reproduce = main.commands["reproduce"]
    assert isinstance(reproduce, click.Group)
    assert {"taubench", "synthetic"} <= set(reproduce.list_commands(click.Context(reproduce)))


def test_summary_shows_sharing_rates_beside_prefix_on_and_off(tmp_path) -> None:
    import json

    rows(budgets=(64, 128, 256, 512)).to_parquet(tmp_path / "taubench.parquet")
    rows(budgets=(64, 128, 256, 512), benchmark="taubench_noprefix").to_parquet(
        tmp_path / "taubench_noprefix.parquet"
    )
    for name, share in (("taubench", 0.0), ("taubench_noprefix", 0.0141)):
        rates = {"entity": share / 2, "signature": share, "either": share}
        (tmp_path / f"{name}.json").write_text(
            json.dumps({"construction": {"cross_source_sharing": rates}})
        )
    text = summary_markdown(tmp_path, n_permutations=99)
    assert "| on | 0.0000 | 0.0000 | 0.0000 |" in text
    assert "| off | 0.0070 | 0.0141 | 0.0141 |" in text
