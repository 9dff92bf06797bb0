"""The LoCoMo summary of ``osumem reproduce locomo`` (and ``osumem bench locomo``):
per budget Recall, any-hit and all-hit, the turns and tokens returned, the differences
to ``flat`` and ``hybrid`` with paired sign-flip p-values over questions; Recall per
question category; category 5 (adversarial) apart; and the LoCoMo paper's top-k-turns
comparison beside its DRAGON retriever.

p-values are query level (one paired difference per question): a conversation holds
hundreds of questions, and five conversations are too few units for an episode-level
test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from osumem.evaluate.defaults import N_PERMUTATIONS
from osumem.evaluate.stats import format_p, paired_test

#: The LoCoMo paper's turn recall at top-5 / 10 / 25 turns with the DRAGON retriever
#: over session-dated turns, every category (the paper's retrieval table).
DRAGON_TURN_RECALL: dict[int, float] = {5: 0.567, 10: 0.662, 25: 0.767}

#: Baselines every method is compared with (when their rows exist).
BASELINES: tuple[str, ...] = ("flat", "hybrid")


def add_hit_all(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``hit_all``: 1 when every evidence turn of the question was
    returned."""
    return rows.assign(hit_all=(rows["n_found"] >= rows["n_evidence"]).astype(float))


def _diff(rows: pd.DataFrame, m: str, base: str, b: int, metric: str, n_perm: int) -> str:
    if m == base or base not in set(rows["method"]):
        return "–"
    d, p, _ = paired_test(
        rows, m, base, metric, budget=b, level="query", n_permutations=n_perm, seed=0
    )
    return f"{100 * d:+.1f} ({format_p(p)})"


def budget_table(rows: pd.DataFrame, *, n_permutations: int = N_PERMUTATIONS) -> list[str]:
    """One line per method × budget: Recall, any-hit, all-hit, mean turns and tokens
    returned, and Recall − flat / − hybrid in pp with query-level p."""
    rows = add_hit_all(rows)
    bases = [b for b in BASELINES if b in set(rows["method"])]
    head = (
        "| method | B | Recall | any-hit | all-hit | turns | tokens | "
        + " | ".join(f"Δ Recall vs {b} pp (p)" for b in bases)
        + " |"
    )
    lines = [head, "|" + "---|" * (7 + len(bases))]
    for m in rows["method"].unique():
        for b in sorted(rows["budget"].unique()):
            sub = rows[(rows["method"] == m) & (rows["budget"] == b)]
            if sub.empty:
                continue
            diffs = [_diff(rows, m, base, int(b), "recall", n_permutations) for base in bases]
            lines.append(
                f"| {m} | {b} | {sub['recall'].mean():.3f} | {sub['hit1'].mean():.3f} | "
                f"{sub['hit_all'].mean():.3f} | {sub['n_selected'].mean():.1f} | "
                f"{sub['cost'].mean():.0f} | " + " | ".join(diffs) + " |"
            )
    return lines


def category_table(rows: pd.DataFrame) -> list[str]:
    """Recall per method × budget × question category (the rows' ``cell``)."""
    cats = sorted(c for c in rows["cell"].unique() if c)
    counts = rows.drop_duplicates("query").groupby("cell").size()
    head = "| method | B | " + " | ".join(f"{c} (n {counts.get(c, 0)})" for c in cats) + " |"
    lines = [head, "|" + "---|" * (2 + len(cats))]
    g = rows.groupby(["method", "budget", "cell"], sort=False)["recall"].mean()
    for m in rows["method"].unique():
        for b in sorted(rows["budget"].unique()):
            vals = [g.get((m, b, c), float("nan")) for c in cats]
            lines.append(f"| {m} | {b} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    return lines


def topk_table(rows: pd.DataFrame) -> list[str]:
    """Turn recall at top-k turns (every turn costs 1) beside DRAGON's."""
    ks = sorted(int(k) for k in rows["budget"].unique())
    head = "| method | " + " | ".join(f"R@{k}" for k in ks) + " |"
    lines = [head, "|" + "---|" * (1 + len(ks))]
    dragon = [DRAGON_TURN_RECALL.get(k) for k in ks]
    lines.append(
        "| DRAGON (LoCoMo paper, session-dated turns) | "
        + " | ".join("–" if v is None else f"{v:.3f}" for v in dragon)
        + " |"
    )
    g = rows.groupby(["method", "budget"], sort=False)["recall"].mean()
    for m in rows["method"].unique():
        lines.append(
            f"| {m} | " + " | ".join(f"{g.get((m, k), float('nan')):.3f}" for k in ks) + " |"
        )
    return lines


def _meta(results: Path, name: str) -> dict[str, Any]:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def summary_markdown(results: Path, *, n_permutations: int = N_PERMUTATIONS) -> str:
    """The LoCoMo summary from the row files in ``results`` (``locomo``,
    ``locomo_adversarial``, ``locomo_topk``; a part is left out when its rows are
    missing)."""
    results = Path(results)
    md = ["## LoCoMo", ""]
    main = results / "locomo.parquet"
    if main.exists():
        rows = pd.read_parquet(main)
        c = _meta(results, "locomo").get("construction", {})
        md += [
            f"{c.get('conversations', '?')} conversations, {c.get('turns', '?')} turns, "
            f"{c.get('queries', '?')} questions of categories 1-4 "
            f"({c.get('queries_per_category', {})}; "
            f"{c.get('dropped_no_evidence', 0)} without a mappable evidence turn left out), "
            f"{c.get('mean_evidence', float('nan')):.2f} evidence turns per question, a turn "
            f"costs {c.get('mean_cost', float('nan')):.1f} tokens on average. p: paired "
            "sign-flip over questions.",
            "",
            *budget_table(rows, n_permutations=n_permutations),
            "",
            "Recall per question category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop):",
            "",
            *category_table(rows),
            "",
        ]
    adv = results / "locomo_adversarial.parquet"
    if adv.exists():
        md += [
            "Category 5 (adversarial: the answer is not in the dialogue; evidence as annotated):",
            "",
            *budget_table(pd.read_parquet(adv), n_permutations=n_permutations),
            "",
        ]
    topk = results / "locomo_topk.parquet"
    if topk.exists():
        md += [
            "Turn recall at top-k turns (every turn costs 1 token, so the budget is the "
            "number of turns; every category), beside the LoCoMo paper's DRAGON "
            "retriever (a larger dense retriever over session-dated turns):",
            "",
            *topk_table(pd.read_parquet(topk)),
            "",
        ]
    return "\n".join(md) + "\n"
