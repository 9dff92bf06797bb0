"""OSU-Mem: trajectory memory for LLM agents with Overlapping Semantic Units."""

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
from osumem.types import Episode, MemoryView, Query, Step

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
