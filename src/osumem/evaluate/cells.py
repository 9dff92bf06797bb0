"""Cell labels T±E± from annotations alone.

T+ when every pair of evidence steps shares an (identical, non-empty) tool signature;
E+ when every pair shares at least one entity. The any-binding marginal is T+ or E+.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from osumem.types import MemoryView


def pairwise_share_tool(view: MemoryView, evidence: Sequence[int]) -> bool:
    """True when all evidence steps carry the same non-empty tool signature."""
    sigs = {view.tool_signatures[i] for i in evidence}
    return len(evidence) >= 2 and len(sigs) == 1 and "" not in sigs


def pairwise_share_action(view: MemoryView, evidence: Sequence[int]) -> bool:
    """True when all evidence steps call the same tool action (template ignored)."""
    acts = {view.tool_actions[i] for i in evidence}
    return len(evidence) >= 2 and len(acts) == 1 and "" not in acts


def pairwise_share_entity(view: MemoryView, evidence: Sequence[int]) -> bool:
    """True when every pair of evidence steps shares at least one entity."""
    if len(evidence) < 2:
        return False
    return all(view.entities[a] & view.entities[b] for a, b in combinations(evidence, 2))


def cell_of(view: MemoryView, evidence: Sequence[int]) -> str:
    """The query's cell label: ``"T+E+"``, ``"T+E-"``, ``"T-E+"`` or ``"T-E-"``."""
    t = "T+" if pairwise_share_tool(view, evidence) else "T-"
    e = "E+" if pairwise_share_entity(view, evidence) else "E-"
    return t + e


def any_binding(cell: str) -> bool:
    """The any-binding marginal: evidence bound by a shared tool or a shared entity."""
    return cell != "T-E-"
