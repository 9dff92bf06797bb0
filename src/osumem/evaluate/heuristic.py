"""The metadata heuristic: predict from annotations alone whether overlap will
help on a corpus.

For every query the cell is computed from the evidence steps' annotations
(:func:`osumem.evaluate.cells.cell_of`; no retrieval is run). The heuristic reports the
tool-sharing marginal ``π_T+`` (the paper's first rule), the any-binding marginal
``π_any`` = share of T+ or E+ queries (the paper's Appendix I alternative), and predicts
"overlap helps" when ``π_any ≥ min_binding_share``.

Threshold (ours): ``min_binding_share = 0.5``. The paper's τ-bench cross-tab at B = 256
(bound cells ≈ +.17 Hit@2 for OSU-Mem over Flat, unbound T−E− −.129) puts the
break-even share at ≈ .43; 0.5 ("most queries are bound") is a round, slightly
conservative rule. It is a parameter, not a fitted value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from osumem.evaluate.cells import any_binding, cell_of
from osumem.types import CELLS, Episode

#: Default threshold on the any-binding share (see the module docstring).
MIN_BINDING_SHARE = 0.5


@dataclass(frozen=True)
class HeuristicVerdict:
    """What the annotations say about a corpus.

    Attributes:
        n_queries: queries with at least two evidence steps (cells need pairs).
        cell_shares: share of queries per cell ``T±E±``.
        tool_share: ``π_T+``, share of queries whose evidence shares a tool signature.
        entity_share: ``π_E+``.
        any_binding_share: ``π_any``, share bound by a shared tool or entity.
        min_binding_share: the threshold used.
        overlap_helps: ``any_binding_share >= min_binding_share``.
    """

    n_queries: int
    cell_shares: dict[str, float]
    tool_share: float
    entity_share: float
    any_binding_share: float
    min_binding_share: float
    overlap_helps: bool

    def to_markdown(self) -> str:
        """One-table Markdown rendering."""
        cells = " | ".join(f"{self.cell_shares[c]:.1%}" for c in CELLS)
        verdict = "overlap predicted to help" if self.overlap_helps else "overlap not predicted"
        return (
            "| queries | " + " | ".join(CELLS) + " | π_T+ | π_E+ | π_any | verdict |\n"
            "|---|---|---|---|---|---|---|---|---|\n"
            f"| {self.n_queries} | {cells} | {self.tool_share:.1%} | {self.entity_share:.1%} | "
            f"{self.any_binding_share:.1%} | {verdict} (π_any ≥ {self.min_binding_share:.2f}"
            f": {'yes' if self.overlap_helps else 'no'}) |"
        )


def verdict_from_cells(
    cells: Sequence[str] | Iterable[str], *, min_binding_share: float = MIN_BINDING_SHARE
) -> HeuristicVerdict:
    """The heuristic from per-query cell labels (e.g. the ``cell`` column of rows)."""
    labels = np.asarray([c for c in cells if c in CELLS], dtype=object)
    n = int(labels.size)
    shares = {c: (float(np.mean(labels == c)) if n else 0.0) for c in CELLS}
    tool = shares["T+E+"] + shares["T+E-"]
    entity = shares["T+E+"] + shares["T-E+"]
    anyb = float(np.mean([any_binding(c) for c in labels])) if n else 0.0
    return HeuristicVerdict(
        n_queries=n,
        cell_shares=shares,
        tool_share=tool,
        entity_share=entity,
        any_binding_share=anyb,
        min_binding_share=float(min_binding_share),
        overlap_helps=bool(n) and anyb >= min_binding_share,
    )


def predict_overlap_helps(
    episodes: Iterable[Episode], *, min_binding_share: float = MIN_BINDING_SHARE
) -> HeuristicVerdict:
    """The heuristic from episodes' annotations alone (cells recomputed from evidence).

    Queries with fewer than two evidence steps have no pair to share anything and are
    left out.
    """
    cells = [
        cell_of(ep.view, q.evidence) for ep in episodes for q in ep.queries if len(q.evidence) >= 2
    ]
    return verdict_from_cells(cells, min_binding_share=min_binding_share)
