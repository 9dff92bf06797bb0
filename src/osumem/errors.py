"""Typed errors raised at the boundary. Each message says what is wrong and where."""

from __future__ import annotations


class OSUMemError(Exception):
    """Base class of every error this library raises on purpose."""


class InvalidInputError(OSUMemError, ValueError):
    """Input data (a log, a vector, a parameter) is malformed."""


class BudgetError(InvalidInputError):
    """A token budget is not a positive integer."""


class DimensionError(InvalidInputError):
    """A vector or matrix has the wrong shape for the memory it is used with."""


class NonFiniteError(InvalidInputError):
    """A vector holds NaN or infinite values."""


class UnknownMethodError(OSUMemError, KeyError):
    """A retrieval method name is not in the registry."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class ConfigError(InvalidInputError):
    """A method or benchmark parameter is unknown or out of range."""


class DataFileError(OSUMemError, FileNotFoundError):
    """A data file is missing or unreadable."""
