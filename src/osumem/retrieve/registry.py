"""The one registry of retrieval methods.

Each entry maps a method name to ``"module:Class"`` and, optionally, config overrides
that make a variant (e.g. ``osumem_disjoint`` is ``osumem`` with ``max_memberships=1``).
Modules are imported lazily so the CLI stays fast. Adding a method: one new file and
one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from osumem.errors import ConfigError, UnknownMethodError
from osumem.retrieve.base import Retriever, RetrieverConfig


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its class path and the config overrides of the variant."""

    name: str
    target: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""


_REGISTRY: dict[str, MethodSpec] = {}


def register(name: str, target: str, description: str = "", **overrides: Any) -> MethodSpec:
    """Register ``name`` → ``module:Class`` with optional config overrides."""
    spec = MethodSpec(name, target, dict(overrides), description)
    _REGISTRY[name] = spec
    return spec


# --- the registry lines -----------------------------------------------------------
_B = "osumem.retrieve"
register("no_memory", f"{_B}.flat:NoMemory", "No context at all: a floor for comparisons")
register("flat", f"{_B}.flat:FlatVector", "Top cosine: vector-only queries, the cheapest call")
register(
    "bm25",
    f"{_B}.hybrid:BM25Retriever",
    "BM25 over step texts: queries that name exact words, ids, names",
)
register(
    "hybrid",
    f"{_B}.hybrid:HybridRetriever",
    "Textbook hybrid (BM25 + cosine, RRF k = 60): the baseline to beat",
)
register(
    "flat_mmr", f"{_B}.mmr:FlatMMR", "Flat + MMR (lambda = 0.7): near-duplicate steps crowd the top"
)
register(
    "truncated_replay",
    f"{_B}.recency:TruncatedReplay",
    "The latest steps that fit: only recency matters",
)
register(
    "sliding_window",
    f"{_B}.recency:SlidingWindow",
    "A window of the last W steps: recency baseline",
)
register(
    "periodic_summary",
    f"{_B}.summary:PeriodicSummary",
    "Recent window + chunk summaries: long histories, recency first",
)
register(
    "coverage", f"{_B}.coverage:CoverageAware", "Cosine + beta per new subgoal: paper baseline"
)
register(
    "disjoint_hierarchy",
    f"{_B}.hierarchy:DisjointHierarchy",
    "Subgoal partitions, coarse to fine: paper baseline",
)
register("tree", f"{_B}.tree:TreeAbstraction", "RAPTOR-style k-means tree: paper baseline")
register(
    "osumem",
    f"{_B}.osumem:OSUMem",
    "OSU-Mem (overlap, M_max = 5): evidence bound by shared entities/tools, small budgets",
)
register(
    "osumem_paper",
    f"{_B}.osumem:OSUMem",
    "OSU-Mem with the paper's parameters pinned: reproducing the paper",
    max_memberships=5,
    coarse_ratio=2.0,
    novelty=True,
    novelty_weight=0.2,
    novelty_min_budget=192,
    coarse_k_rule="mean_cost",
)
register(
    "osumem_disjoint",
    f"{_B}.osumem:OSUMem",
    "OSU-Mem, disjoint (M_max = 1): as osumem, one OSU per step",
    max_memberships=1,
)
register(
    "osumem_sim_only",
    f"{_B}.osumem:OSUMem",
    "OSU-Mem, similarity view only: ablation",
    views=("similarity",),
)
register(
    "osumem_no_novelty",
    f"{_B}.osumem:OSUMem",
    "OSU-Mem without novelty penalty: ablation",
    novelty=False,
)
register(
    "osumem_adaptive",
    f"{_B}.adaptive:AdaptiveOSUMem",
    "Flat unless the head binds OSUs: vector queries of unknown structure",
)
register(
    "osumem_adaptive_v1",
    f"{_B}.adaptive:AdaptiveOSUMem",
    "osumem_adaptive's first frozen version: reproducing its evaluation",
    orphan_share=0.0,
)
register(
    "osumem_hybrid",
    f"{_B}.osumem_hybrid:HybridOSUMem",
    "Cosine + BM25 fusion with neighbours (text queries); osumem_adaptive for vectors",
)
register(
    "osumem_gf",
    f"{_B}.osumem:OSUMemGF",
    "OSU-Mem + GF (ground-truth filtering ORACLE): an upper bound, never deployable",
)
register(
    "osumem_coverage",
    f"{_B}.osumem:OSUMemCoverage",
    "OSU-Mem coverage-guided greedy (overlap): paper variant",
)
register(
    "osumem_coverage_disjoint",
    f"{_B}.osumem:OSUMemCoverage",
    "OSU-Mem coverage-guided greedy (disjoint, M_max = 1): paper variant",
    max_memberships=1,
)
# -----------------------------------------------------------------------------------


def available() -> list[str]:
    """Every registered method name, in registration order."""
    return list(_REGISTRY)


def get_spec(name: str) -> MethodSpec:
    """The :class:`MethodSpec` for ``name``; raises :class:`UnknownMethodError`."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownMethodError(
            f"unknown method {name!r}; available: {', '.join(_REGISTRY)}"
        ) from None


def get_class(name: str) -> type[Retriever]:
    """Import and return the retriever class registered as ``name``."""
    spec = get_spec(name)
    module_name, _, cls_name = spec.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise UnknownMethodError(
            f"method {name!r} is registered but its module {module_name} is not available: {exc}"
        ) from exc
    cls = getattr(module, cls_name)
    if not (isinstance(cls, type) and issubclass(cls, Retriever)):
        raise UnknownMethodError(f"{spec.target} is not a Retriever")
    return cls


def deployable() -> list[str]:
    """Every registered method a live memory may use (all but the oracles), in
    registration order."""
    return [name for name in _REGISTRY if not get_class(name).is_oracle]


def check_deployable(name: str) -> None:
    """Refuse a method that reads the ground truth (an oracle, ``is_oracle``): only the
    benchmark harness has ground truth to give it; a live memory would answer as
    another method does while claiming to be the oracle."""
    if get_class(name).is_oracle:
        raise ConfigError(
            f"method {name!r} is an oracle: it reads the benchmark's ground truth (each query's evidence), "
            "which a live memory does not have; it runs in the benchmark harness only "
            "(osumem bench, osumem reproduce)"
        )


def make_config(name: str, params: Mapping[str, Any] | None = None) -> RetrieverConfig:
    """The config of method ``name``: its class defaults, the variant's overrides, then
    ``params`` (strings are coerced to the field types; unknown names, unreadable
    values and values out of range are each reported, together, in one
    :class:`ConfigError`)."""
    spec = get_spec(name)
    return get_class(name).Config().with_strings({**spec.overrides, **(params or {})}, name)


def create(name: str, params: Mapping[str, Any] | None = None, *, seed: int = 0) -> Retriever:
    """Instantiate method ``name`` with optional parameter overrides."""
    return get_class(name)(make_config(name, params), seed=seed)


def parse_overrides(items: Iterable[str]) -> dict[str, dict[str, str]]:
    """Parse ``method.param=value`` strings into ``{method: {param: value}}``.

    The method part must be a registered method name; see :func:`params_for` for
    which methods an override reaches.
    """
    out: dict[str, dict[str, str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        method, dot, param = key.strip().partition(".")
        if not sep or not dot or not method or not param:
            raise ConfigError(f"--set expects method.param=value, got {item!r}")
        get_spec(method)
        out.setdefault(method, {})[param] = value.strip()
    return out


def base_of(name: str) -> str | None:
    """The registered base method of variant ``name``: the entry with the same class
    and no overrides of its own (``None`` when ``name`` is itself a base)."""
    spec = get_spec(name)
    if not spec.overrides:
        return None
    for other, candidate in _REGISTRY.items():
        if candidate.target == spec.target and not candidate.overrides:
            return other
    return None


def params_for(name: str, overrides: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The ``--set`` parameters that apply to method ``name``.

    Overrides addressed to ``name`` itself win. Overrides addressed to its base method
    (:func:`base_of`, e.g. ``osumem`` for ``osumem_disjoint``) apply too, except for
    parameters this variant fixes itself. Overrides addressed to one variant never
    reach the base or the other variants.
    """
    spec = get_spec(name)
    params: dict[str, str] = {}
    base = base_of(name)
    if base is not None and base in overrides:
        params.update({k: v for k, v in overrides[base].items() if k not in spec.overrides})
    params.update(overrides.get(name, {}))
    return params
