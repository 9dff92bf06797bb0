"""One call run on a daemon thread, its result (or what it raised) taken later in the
caller's thread: how the step, centroid and similarity-view HNSW indexes build off
the query path (hnswlib releases the GIL while it inserts, so the build runs on a
second core)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BackgroundCall(Generic[T]):
    """``fn()`` started on a daemon thread named ``name``."""

    def __init__(self, fn: Callable[[], T], name: str) -> None:
        self._out: list[T] = []
        self._failed: list[BaseException] = []

        def work() -> None:
            try:
                self._out.append(fn())
            except BaseException as exc:  # re-raised by result(), in the caller's thread
                self._failed.append(exc)

        self._thread = threading.Thread(target=work, name=name, daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the call has not returned yet."""
        return self._thread.is_alive()

    def result(self) -> T:
        """Wait for the call; its return value, or raise what it raised."""
        self._thread.join()
        if self._failed:
            raise self._failed[0]
        return self._out[0]
