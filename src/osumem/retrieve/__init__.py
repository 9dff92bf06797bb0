"""Retrieval methods behind one interface, found through one registry."""

from osumem.retrieve.base import (
    Retriever,
    RetrieverConfig,
    Selection,
    check_budget,
    greedy_pack,
    pack_first_fit,
)
from osumem.retrieve.registry import available, create, get_class, make_config

__all__ = [
    "Retriever",
    "RetrieverConfig",
    "Selection",
    "available",
    "check_budget",
    "create",
    "get_class",
    "greedy_pack",
    "make_config",
    "pack_first_fit",
]
