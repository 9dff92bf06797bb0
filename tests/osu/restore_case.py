"""A restore's input with kept entries of units no longer live and a live unit
without a kept member (no SciPy import here: a test checks that the restore needs
none)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from conftest import make_view


def restore_case(seed: int = 5) -> tuple[Any, ...]:
    """Kept entries that point at units no longer live, and a live unit (8) without a
    kept member: the restore's input and the live units."""
    rng = np.random.default_rng(seed)
    n, d, g, width = 300, 16, 40, 3
    emb = rng.standard_normal((n, d)).astype(np.float32)
    units = np.setdiff1d(np.arange(g), [8])  # live unit 8 keeps no member
    kept = np.stack([rng.choice(units, size=width, replace=False) for _ in range(n)])
    kept[rng.random((n, width)) < 0.4] = -1  # a step sits in up to `width` units
    live = np.setdiff1d(np.arange(g), [3, 17, 29])  # kept entries point at these too
    out = np.full((g, d), np.nan, dtype=np.float32)
    slots = SimpleNamespace(kept=SimpleNamespace(v=kept), live_cent=SimpleNamespace(a=out))
    return slots, make_view(n, d, embeddings=emb), live, n, g
