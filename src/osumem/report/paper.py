"""The paper's published numbers, as data, to print beside ours.

Keys are ``(benchmark, item, budget, metric)``: ``item`` is a registered method name, a
cell label (``"T+E+"``) or a contrast (``"osumem-flat"``); ``budget`` is ``None`` where
the number has none. Metrics: ``recall``, ``hit2`` (fractions), ``p_recall``,
``p_hit2`` (p-values), ``hit2_gap``/``recall_gap`` (differences), efficiency
``amortised_ms``, ``retrieve_ms``, ``storage_kb``, membership ``mean``/``median``/
``share_none``. A value the paper states only as a bound is stored with its bound in
:data:`PAPER_NOTES`.
"""

from __future__ import annotations

from typing import Any

PaperKey = tuple[str, str, int | None, str]

PAPER: dict[PaperKey, float] = {
    # Synthetic, B = 256 (Table 2 and the ablations)
    ("synthetic", "osumem", 256, "recall"): 0.221,
    ("synthetic", "osumem", 256, "hit2"): 0.084,
    ("synthetic", "flat_mmr", 256, "recall"): 0.158,
    ("synthetic", "flat_mmr", 256, "hit2"): 0.052,
    ("synthetic", "osumem_disjoint", 256, "recall"): 0.138,
    ("synthetic", "osumem_disjoint", 256, "hit2"): 0.034,
    ("synthetic", "osumem_sim_only", 256, "recall"): 0.110,
    ("synthetic", "osumem_sim_only", 256, "hit2"): 0.014,
    ("synthetic", "osumem_no_novelty", 256, "p_recall"): 0.307,
    ("synthetic", "osumem_no_novelty", 256, "p_hit2"): 0.876,
    # Benchmark construction (counts and sharing rates)
    ("synthetic", "construction", None, "episodes_with_queries"): 197.0,
    ("synthetic", "construction", None, "queries"): 907.0,
    ("synthetic", "construction", None, "share_identical_signature"): 0.393,
    ("synthetic", "construction", None, "share_same_action"): 0.834,
    ("taubench", "construction", None, "episodes"): 125.0,
    ("taubench", "construction", None, "queries"): 328.0,
    ("taubench", "construction", None, "mean_evidence"): 3.5,
    ("taubench", "construction", None, "share_T+E+"): 0.171,
    # Efficiency (64-d synthetic; 384-d SBERT)
    ("efficiency-64", "osumem", None, "amortised_ms"): 8.3,
    ("efficiency-64", "osumem", None, "storage_kb"): 209.0,
    ("efficiency-64", "tree", None, "amortised_ms"): 57.4,
    ("efficiency-64", "tree", None, "storage_kb"): 363.0,
    ("efficiency-384", "osumem", None, "retrieve_ms"): 2.6,
    # tau-bench cross-tab, Hit@2 OSU-Mem − Flat per cell
    **{
        ("taubench", "T+E+", b, "hit2_gap"): v
        for b, v in zip((64, 128, 256, 512), (0.161, 0.232, 0.179, 0.161), strict=True)
    },
    **{
        ("taubench", "T-E-", b, "hit2_gap"): v
        for b, v in zip((64, 128, 256, 512), (0.008, -0.023, -0.129, -0.364), strict=True)
    },
    **{
        ("taubench", "T-E+", b, "hit2_gap"): v
        for b, v in zip((64, 128, 256, 512), (0.045, 0.114, 0.159, 0.227), strict=True)
    },
    # Interaction test
    **{
        ("taubench", "interaction", b, "p_hit2"): v
        for b, v in zip((64, 128, 256, 512), (0.308, 0.081, 0.002, 0.558), strict=True)
    },
    ("taubench", "interaction", 256, "p_recall"): 0.021,
    ("taubench_weak", "T+E+", 256, "hit2_gap"): 0.143,
    # Stage D (augmented tau-bench), B = 256
    ("taubench_staged", "osumem", 256, "hit2"): 0.435,
    ("taubench_staged", "flat", 256, "hit2"): 0.328,
    ("taubench_staged", "osumem_disjoint", 256, "hit2"): 0.387,
    ("taubench_staged", "osumem_sim_only", 256, "hit2"): 0.285,
    ("taubench_staged", "osumem-flat", 256, "hit2_gap"): 0.107,
    ("taubench_staged", "osumem-flat", 256, "hit2_gap_episode"): 0.141,
    ("taubench_staged", "osumem-flat", 256, "p_hit2_episode"): 0.001,
    ("taubench_staged", "osumem-osumem_disjoint", 256, "p_hit2_episode"): 0.012,
    ("taubench", "flat", 256, "hit2"): 0.045,
    # ToolBench
    ("taubench", "T+E+", None, "n"): 56.0,
    ("taubench", "T-E+", None, "n"): 44.0,
    ("toolbench", "flat", 200, "recall"): 0.686,
    ("toolbench", "flat", 1600, "recall"): 0.917,
    **{
        ("toolbench", "overlap-disjoint", b, "hit2_gap"): v
        for b, v in zip((200, 400, 800, 1600), (0.062, 0.048, 0.037, 0.038), strict=True)
    },
    **{
        ("toolbench", "overlap-disjoint", b, "recall_gap"): v
        for b, v in zip((200, 400, 800, 1600), (0.027, 0.037, 0.021, 0.016), strict=True)
    },
    ("toolbench", "membership_overlap", None, "mean"): 2.16,
    ("toolbench", "membership_overlap", None, "median"): 2.0,
    ("toolbench", "membership_overlap", None, "share_none"): 0.0,
    ("toolbench", "membership_disjoint", None, "mean"): 0.87,
    ("toolbench", "membership_disjoint", None, "median"): 1.0,
    ("toolbench", "membership_disjoint", None, "share_none"): 0.132,
}

#: Statements the paper gives as bounds rather than values.
PAPER_NOTES: dict[PaperKey, str] = {
    ("synthetic", "osumem", 256, "p_vs_baselines"): "p ≤ .002 (n = 197 episodes)",
    ("synthetic", "osumem", None, "mmax"): "saturates at M_max = 5",
    ("efficiency-384", "osumem", None, "storage_kb"): "largest of all methods",
    ("toolbench", "osumem", None, "routing_recall"): "default coarse-to-fine recall < .17",
    ("taubench", "T+E+", None, "p_hit2"): "p < .05 at every budget (n = 56)",
    ("taubench", "T-E-", 512, "p_hit2"): "p < .001",
    ("taubench_staged", "flat", 256, "p_vs_reference"): "Hit@2 p = .001 (episode level, Δ +.141)",
    ("taubench_staged", "osumem_disjoint", 256, "p_vs_reference"): "Hit@2 p = .012 (episode level)",
}


def paper_value(benchmark: str, item: str, budget: int | None, metric: str) -> float | None:
    """The paper's number for this key, or ``None`` when the paper gives none."""
    return PAPER.get((benchmark, item, None if budget is None else int(budget), metric))


def paper_cell(benchmark: str, item: str, budget: int | None, metric: str, fmt: str = ".3f") -> str:
    """The paper's number formatted for a table cell (``"–"`` when there is none);
    ``fmt="p"`` writes a p-value as :func:`osumem.evaluate.stats.format_p` does."""
    v = paper_value(benchmark, item, budget, metric)
    if v is None:
        note = PAPER_NOTES.get((benchmark, item, budget, metric))
        return note if note else "–"
    if fmt == "p":  # a p-value, written as our tables write them
        from osumem.evaluate.stats import format_p

        return format_p(v)
    return format(v, fmt)


def as_records() -> list[dict[str, Any]]:
    """Every paper number as a record (for JSON export and tests)."""
    return [
        {"benchmark": b, "item": i, "budget": bud, "metric": m, "value": v}
        for (b, i, bud, m), v in PAPER.items()
    ]
