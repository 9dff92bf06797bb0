"""The cyclic garbage collector held off while a memory reads a namespace in bulk.

Why: reading a namespace makes a Python object per stored column of every step (the
rows the store returns, their texts, entity sets, the snapshot's unit tuples), none
of them in a reference cycle. Each 700 new container objects start a collection, and
each collection of the older generations walks every tracked object made so far: the
first retrieve after opening a 200,016-step memory ran 1,084 collections (0.34-0.36 s
of their own, more in the caches they evicted), nearly all while it read the steps
and the stored structure (``benchmarks/gc_walk.py``; docs/decisions.md, "No stalls in
the agent loop").

How: :func:`paused` turns automatic collection off for the duration of the block and
back on when the last overlapping block ends (blocks on several threads share one
pause: :class:`~osumem.memory.process_wide.ProcessWide`), unless it was already off,
which it leaves as it was. The collector's setting is process-wide, so a thread that
allocates meanwhile collects later, not less: the first collection after the block
walks what was made during it. Nothing is frozen (``gc.freeze`` would exempt the
caller's objects too).
"""

from __future__ import annotations

import gc
from contextlib import AbstractContextManager

from osumem.memory.process_wide import ProcessWide


def _disable() -> bool:
    was = gc.isenabled()
    gc.disable()
    return was


def _enable_if(was: bool) -> None:
    if was:
        gc.enable()


_pause = ProcessWide(_disable, _enable_if)


def paused() -> AbstractContextManager[None]:
    """Automatic garbage collection off inside the ``with`` block (see the module
    doc)."""
    return _pause.held()
