"""Retrieval methods behind one interface, found through one registry."""

from osumem.retrieve.base import Retriever, RetrieverConfig, RetrieverState, Selection
from osumem.retrieve.budget import check_budget, validated_budget
from osumem.retrieve.packing import greedy_pack, pack_first_fit
from osumem.retrieve.registry import available, create, get_class, make_config

__all__ = [
    "Retriever",
    "RetrieverConfig",
    "RetrieverState",
    "Selection",
    "available",
    "check_budget",
    "create",
    "get_class",
    "greedy_pack",
    "make_config",
    "pack_first_fit",
    "validated_budget",
]
