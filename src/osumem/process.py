"""What the ``osumem`` command settled for its whole process before the library loaded.

Kept in a module of its own, importing nothing, so that the command line can write it
before NumPy loads and :mod:`osumem.memory.blas` can read it later.
"""

from __future__ import annotations

#: The environment variables through which each BLAS library reads its thread count
#: when it loads (OpenBLAS, MKL, BLIS, Apple's Accelerate).
BLAS_THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)

#: The BLAS thread count the command line put in every one of
#: :data:`BLAS_THREAD_VARIABLES` before any BLAS library was loaded (``None``: it did
#: not). Every BLAS library of this process then runs with at most that many threads,
#: and a memory call's limit of as many or more has nothing to change.
blas_threads_at_start: int | None = None
