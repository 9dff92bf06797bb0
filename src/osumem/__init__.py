"""OSU-Mem: trajectory memory for LLM agents with Overlapping Semantic Units.

The step and view types (:class:`Step`, :class:`Episode`, :class:`Query`,
:class:`MemoryView`) load :mod:`osumem.types`, and with it NumPy, at their first use:
importing the package alone loads nothing heavy, so the ``osumem`` command can settle
the BLAS threads before NumPy starts them (see :mod:`osumem.cli`).
"""

from typing import TYPE_CHECKING, Any

from osumem.errors import (
    BudgetError,
    ConfigError,
    DataFileError,
    DimensionError,
    InvalidInputError,
    NonFiniteError,
    OSUMemError,
    UnknownMethodError,
)

if TYPE_CHECKING:
    from osumem.types import Episode, MemoryView, Query, Step

_TYPES = frozenset({"Episode", "MemoryView", "Query", "Step"})


def __getattr__(name: str) -> Any:
    if name in _TYPES:
        import osumem.types

        return getattr(osumem.types, name)
    raise AttributeError(f"module 'osumem' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "BudgetError",
    "ConfigError",
    "DataFileError",
    "DimensionError",
    "Episode",
    "InvalidInputError",
    "MemoryView",
    "NonFiniteError",
    "OSUMemError",
    "Query",
    "Step",
    "UnknownMethodError",
    "__version__",
]
