"""Thread helpers of the memory service: a readers-writer lock, an encoder used by one
thread at a time, and torch's intra-op thread setting."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from osumem.embed import Encoder


def set_torch_threads(n: int | None) -> None:
    """Set torch's intra-op thread count when torch is loaded (``None``: leave it).

    Call it in every thread that encodes: with torch's OpenMP backend the setting of
    a thread that already ran torch work stays as it was."""
    torch = sys.modules.get("torch")
    if n is not None and torch is not None:
        torch.set_num_threads(n)


class SerializedEncoder:
    """An encoder used by one thread at a time.

    Hugging Face fast tokenizers keep their truncation and padding settings in a Rust
    object that raises "Already borrowed" when one thread changes them while another
    tokenizes; the SBERT encoder tokenizes with truncation to encode and without it to
    count tokens, so concurrent queries and adds could collide. On CPU the encodings
    compete for the same cores anyway, so the lock costs little throughput.
    """

    def __init__(self, encoder: Encoder) -> None:
        self._encoder = encoder
        self._lock = threading.Lock()

    @property
    def encoder_id(self) -> str:
        """The wrapped encoder's id."""
        return self._encoder.encoder_id

    @property
    def dim(self) -> int:
        """The wrapped encoder's dimension."""
        return self._encoder.dim

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Encode under the lock."""
        with self._lock:
            return self._encoder.encode(texts)

    def count_tokens(self, texts: Sequence[str]) -> NDArray[np.int64]:
        """Count tokens under the lock."""
        with self._lock:
            return self._encoder.count_tokens(texts)


class ReadWriteLock:
    """Many readers or one writer; a waiting writer blocks new readers (no starvation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def acquire_read(self) -> None:
        """Enter as a reader (waits while a writer holds or waits for the lock)."""
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1

    def try_acquire_read(self) -> bool:
        """Enter as a reader only if that needs no wait (no writer holds or waits for
        the lock); whether it entered."""
        with self._cond:
            if self._writer or self._writers_waiting:
                return False
            self._readers += 1
            return True

    def release_read(self) -> None:
        """Leave as a reader."""
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        """Enter as the only writer (waits for the readers inside to leave)."""
        with self._cond:
            self._writers_waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writer = True

    def release_write(self) -> None:
        """Leave as the writer."""
        with self._cond:
            self._writer = False
            self._cond.notify_all()
