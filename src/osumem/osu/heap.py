"""Handing freed heap memory back to the operating system.

Large constructions free many mid-sized temporaries that glibc's allocator would keep
mapped; ``malloc_trim`` returns them. This is the one place that calls into the C
library (through ``ctypes``); elsewhere (no glibc) it does nothing.
"""

from __future__ import annotations

from typing import Any

_LIBC: Any = None


def release_free_memory() -> None:
    """Hand the heap memory freed so far back to the operating system (glibc's
    ``malloc_trim``; nothing elsewhere)."""
    global _LIBC
    if _LIBC is None:
        import ctypes  # here: ctypes.util pulls in subprocess, shutil and tempfile
        import ctypes.util

        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)
