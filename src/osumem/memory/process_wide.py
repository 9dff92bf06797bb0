"""A process-wide setting changed for the duration of overlapping blocks: set when the
first block starts, put back when the last one ends, whichever threads they run on
(the BLAS thread count of :mod:`osumem.memory.blas`, the garbage collector of
:mod:`osumem.memory.collector`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

_T = TypeVar("_T")


class ProcessWide(Generic[_T]):
    """``change(*args)`` when the first block starts (the first block's ``args``; it
    returns what ``restore`` needs to put the setting back), ``restore(that)`` when the
    last overlapping block ends; both under ``lock`` (one of the caller's that guards
    the setting elsewhere too, or one of its own)."""

    def __init__(
        self,
        change: Callable[..., _T],
        restore: Callable[[_T], None],
        lock: threading.Lock | None = None,
    ) -> None:
        self._change = change
        self._restore = restore
        self._lock = lock or threading.Lock()
        self._depth = 0
        self._saved: _T | None = None

    @contextmanager
    def held(self, *args: Any) -> Iterator[None]:
        """The setting changed inside the block (shared with the blocks overlapping it:
        the first one's ``args`` hold for them all)."""
        with self._lock:
            if self._depth == 0:
                self._saved = self._change(*args)
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    saved, self._saved = self._saved, None
                    self._restore(saved)  # type: ignore[arg-type]
