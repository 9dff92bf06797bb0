"""A process-wide setting changed for the duration of overlapping blocks: set when the
first block starts, put back when the last one ends, whichever threads they run on
(the BLAS thread count of :mod:`osumem.memory.blas`, the garbage collector of
:mod:`osumem.memory.collector`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
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

    def held(self, *args: Any) -> _Held[_T]:
        """The setting changed inside the ``with`` block (shared with the blocks
        overlapping it: the first one's ``args`` hold for them all). A class, not a
        generator: entered on every memory call, where a generator's context manager
        cost about a microsecond more."""
        return _Held(self, args)

    def _enter(self, args: tuple[Any, ...]) -> None:
        with self._lock:
            if self._depth == 0:
                self._saved = self._change(*args)
            self._depth += 1

    def _exit(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                saved, self._saved = self._saved, None
                self._restore(saved)  # type: ignore[arg-type]


class _Held(Generic[_T]):
    __slots__ = ("_args", "_owner")

    def __init__(self, owner: ProcessWide[_T], args: tuple[Any, ...]) -> None:
        self._owner = owner
        self._args = args

    def __enter__(self) -> None:
        self._owner._enter(self._args)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._owner._exit()
