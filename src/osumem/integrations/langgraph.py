"""LangGraph: the memory as a ``BaseStore``, and hooks for a graph's trajectory.

:class:`OSUMemStore` is a LangGraph store (``langgraph.store.base.BaseStore``): every
operation comes through :meth:`OSUMemStore.batch` (``GetOp``, ``PutOp``, ``SearchOp``,
``ListNamespacesOp``), so ``put``, ``get``, ``search``, ``delete``,
``list_namespaces`` and their ``a``-prefixed async twins all work, and
``create_react_agent(model, tools, store=OSUMemStore(memory))`` gives the graph's
tools a long-term memory ranked by OSU-Mem::

    store = OSUMemStore(Memory.open("agent.db"))
    store.put(("users", "ana"), "seat", {"text": "prefers aisle seats"})
    store.search(("users", "ana"), query="where does Ana sit?", limit=3)

How items are kept: a store namespace (a tuple of labels) is one memory namespace
(``<prefix>:`` and the labels joined by ``/``, each percent-encoded), an item is one
step whose text is the item's value (the ``fields`` given, else the whole value as
JSON) and whose metadata holds the key and the value, so ``search(filter=...)`` on the
value's fields is a memory filter (``{"type": "fact"}``, ``{"score": {"$gt": 4}}``)
applied before ranking. A ``put`` to an existing key updates that step (the text
encoded again), a ``put`` of ``None`` deletes it. A search with a query ranks the
namespace's items with the memory's method under ``budget`` tokens, best first (its
``score`` is the item's cosine with the query); without a query it lists them, the
most recently updated first. ``index=False`` keeps an item out of ranked searches.

:func:`record_messages` stores a graph's messages (LangChain messages) in the
trajectory memory, each once (by message id); :func:`recording_hook` and
:func:`context_hook` do that and put retrieved context before the model, as
``post_model_hook`` and ``pre_model_hook`` of ``create_react_agent``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

from osumem.errors import InvalidInputError, UnknownFilterKeyError, show_value
from osumem.integrations import missing
from osumem.memory import Memory
from osumem.memory.retrieved import StoredStep
from osumem.types import Step

try:
    from langchain_core.messages import BaseMessage, SystemMessage, convert_to_openai_messages
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing("langgraph", "langgraph", exc) from None

__all__ = [
    "NamespaceShapeError",
    "OSUMemStore",
    "context_hook",
    "record_messages",
    "recording_hook",
]

#: The role of an item's step.
ITEM_ROLE = "item"


class NamespaceShapeError(InvalidInputError, InvalidNamespaceError):
    """A store namespace that is not a tuple of non-empty text labels (both an
    osumem :class:`~osumem.errors.InvalidInputError` and LangGraph's
    ``InvalidNamespaceError``)."""


def _labels(namespace: Any, field: str, *, empty: bool = False) -> tuple[str, ...]:
    """``namespace`` checked: a tuple (or list) of non-empty text labels."""
    if not isinstance(namespace, tuple | list):
        raise NamespaceShapeError(
            f"{field}: expected a tuple of strings such as ('users', 'ana'), got "
            f"{show_value(namespace)} ({type(namespace).__name__})"
        )
    if not namespace and not empty:
        raise NamespaceShapeError(f"{field}: expected at least one label, got ()")
    for i, label in enumerate(namespace):
        if not isinstance(label, str) or not label:
            raise NamespaceShapeError(
                f"{field}[{i}]: expected a non-empty string, got {show_value(label)}"
            )
    return tuple(namespace)


def _time(value: float | None) -> datetime:
    return datetime.fromtimestamp(0 if value is None else value, tz=UTC)


class OSUMemStore(BaseStore):
    """A LangGraph ``BaseStore`` over a :class:`~osumem.memory.Memory` (see the module
    doc). Safe to share between a graph's threads and tasks: calls on one store are
    serialised, the async ones run off the event loop.

    Args:
        memory: the memory holding the items.
        prefix: the memory namespaces of this store start with ``<prefix>:`` (other
            namespaces of the memory are not the store's).
        budget: token budget of one ranked search (default: the memory's).
        fields: the value's fields (dotted paths) whose text is ranked; default: the
            whole value as JSON.
        method: the retrieval method of ranked searches (default: the memory's).
    """

    supports_ttl = False

    def __init__(
        self,
        memory: Memory,
        *,
        prefix: str = "langgraph",
        budget: int | None = None,
        fields: Sequence[str] | None = None,
        method: str | None = None,
    ) -> None:
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory: expected an osumem Memory, got {show_value(memory)}")
        if not isinstance(prefix, str) or not prefix or ":" in prefix:
            raise InvalidInputError(
                f"prefix: expected a name without ':', got {show_value(prefix)}"
            )
        self.memory = memory
        self.prefix = prefix
        self.budget = budget
        self.fields = None if fields is None else tuple(fields)
        self.method = method
        self._lock = threading.RLock()

    # --- namespaces ---------------------------------------------------------------

    def memory_namespace(self, namespace: Sequence[str]) -> str:
        """The memory namespace of a store namespace."""
        labels = _labels(namespace, "namespace")
        return f"{self.prefix}:" + "/".join(quote(label, safe="") for label in labels)

    def store_namespace(self, name: str) -> tuple[str, ...] | None:
        """The store namespace of a memory namespace (``None``: not this store's)."""
        head = f"{self.prefix}:"
        if not name.startswith(head):
            return None
        return tuple(unquote(label) for label in name[len(head) :].split("/"))

    def _namespaces(self) -> list[tuple[str, ...]]:
        found = (self.store_namespace(n) for n in self.memory.namespaces())
        return sorted(ns for ns in found if ns)

    # --- the one entry point ---------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order (every ``PutOp`` in one memory transaction with the
        others of the batch) and return one result per op."""
        todo = list(ops)
        with self._lock:
            if not any(isinstance(op, PutOp) for op in todo):
                return [self._run(op) for op in todo]
            with self.memory.transaction():
                return [self._run(op) for op in todo]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` on a worker thread (the event loop is not blocked)."""
        todo = list(ops)
        return await asyncio.to_thread(self.batch, todo)

    def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list(op)
        raise InvalidInputError(f"op: unknown store operation {type(op).__name__}")

    # --- operations -------------------------------------------------------------------

    def _find(self, name: str, key: str) -> StoredStep | None:
        if not self.memory.n_steps(name):
            return None
        try:
            found = self.memory.steps(name, filter={"key": key, "role": ITEM_ROLE})
        except UnknownFilterKeyError:
            return None  # the namespace holds steps that are not this store's items
        return found[0] if found else None

    def _item(self, step: StoredStep, namespace: tuple[str, ...], score: Any = None) -> Any:
        meta = step.metadata
        created, updated = _time(step.time), _time(step.updated or step.time)
        if score is None:
            return Item(
                value=dict(meta["value"]),
                key=str(meta["key"]),
                namespace=namespace,
                created_at=created,
                updated_at=updated,
            )
        return SearchItem(
            namespace, str(meta["key"]), dict(meta["value"]), created, updated, score=score
        )

    def _get(self, op: GetOp) -> Item | None:
        namespace = _labels(op.namespace, "namespace")
        step = self._find(self.memory_namespace(namespace), self._key(op.key))
        return None if step is None else self._item(step, namespace)

    @staticmethod
    def _key(key: Any) -> str:
        if not isinstance(key, str) or not key:
            raise InvalidInputError(f"key: expected a non-empty string, got {show_value(key)}")
        return key

    def text_of(self, value: Mapping[str, Any], fields: Sequence[str] | None = None) -> str:
        """The text of a value that ranked searches read: its ``fields`` (dotted
        paths; ``"$"``: the whole value) as text, else the whole value as JSON."""
        chosen = fields if fields is not None else self.fields
        if not chosen:
            return json.dumps(value, sort_keys=True, ensure_ascii=False)
        parts = []
        for path in chosen:
            part: Any = value
            for name in [] if path == "$" else path.split("."):
                part = part.get(name) if isinstance(part, Mapping) else None
            if part is not None:
                parts.append(part if isinstance(part, str) else json.dumps(part, sort_keys=True))
        return "\n".join(parts) or json.dumps(value, sort_keys=True, ensure_ascii=False)

    def _put(self, op: PutOp) -> None:
        namespace = _labels(op.namespace, "namespace")
        key = self._key(op.key)
        name = self.memory_namespace(namespace)
        old = self._find(name, key)
        if op.value is None:
            if old is not None:
                self.memory.delete(name, ids=[old.step_id])
            return
        if not isinstance(op.value, Mapping):
            raise InvalidInputError(f"value: expected a dict, got {show_value(op.value)}")
        value = dict(op.value)
        fields = op.index if isinstance(op.index, list) else None
        text = self.text_of(value, fields)
        meta = {"key": key, "value": value, "indexed": op.index is not False}
        if old is not None:
            if old.text == text:
                self.memory.update(name, id=old.step_id, metadata=meta)
            else:
                self.memory.update(name, id=old.step_id, text=text, metadata=meta)
            return
        encoder = self.memory.encoder
        cost = int(encoder.count_tokens([text])[0]) if encoder is not None else 1
        step = Step(role=ITEM_ROLE, text=text, source="/".join(namespace), cost=cost)
        self.memory.add_steps([step], namespace=name, metadata=meta)

    def _matching(self, prefix: Any) -> list[tuple[str, ...]]:
        labels = _labels(prefix, "namespace_prefix", empty=True)
        return [ns for ns in self._namespaces() if ns[: len(labels)] == labels]

    @staticmethod
    def _value_filter(spec: Mapping[str, Any] | None) -> dict[str, Any]:
        """A store filter (on the value's fields) as a memory filter."""
        out: dict[str, Any] = {"role": ITEM_ROLE}
        if spec is None:
            return out
        if not isinstance(spec, Mapping):
            raise InvalidInputError(f"filter: expected a dict, got {show_value(spec)}")
        for key, value in spec.items():
            if not isinstance(key, str) or not key:
                raise InvalidInputError(f"filter: key {show_value(key)} is not text")
            out[f"metadata.value.{key}"] = value
        return out

    def _search(self, op: SearchOp) -> list[SearchItem]:
        where = self._value_filter(op.filter)
        if op.limit < 0 or op.offset < 0:
            raise InvalidInputError(
                f"limit, offset: expected numbers >= 0, got {op.limit}, {op.offset}"
            )
        found: list[tuple[float, Any]] = []
        for namespace in self._matching(op.namespace_prefix):
            name = self.memory_namespace(namespace)
            try:
                if op.query:
                    ranked = {**where, "metadata.indexed": {"$ne": False}}
                    got = self.memory.retrieve(
                        op.query, self.budget, namespace=name, method=self.method, filter=ranked
                    )
                    cosine = {s.position: s.cosine for s in got.explain().steps}
                    steps = self.memory.steps(name, positions=got.positions)
                    found += [
                        (cosine[s.position], self._item(s, namespace, cosine[s.position]))
                        for s in steps
                    ]
                else:
                    for s in self.memory.steps(name, filter=where):
                        found.append((s.updated or s.time or 0.0, self._item(s, namespace, None)))
            except UnknownFilterKeyError:
                continue  # no item of this namespace has the field: none matches
        found.sort(key=lambda pair: -pair[0])
        out = []
        for _, item in found[op.offset : op.offset + op.limit]:
            if not isinstance(item, SearchItem):
                item = SearchItem(
                    item.namespace, item.key, item.value, item.created_at, item.updated_at
                )
            out.append(item)
        return out

    def _list(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        names = self._namespaces()
        for cond in op.match_conditions or ():
            names = [ns for ns in names if _matches(ns, cond)]
        if op.max_depth is not None:
            names = sorted({ns[: op.max_depth] for ns in names})
        return names[op.offset : op.offset + op.limit]


def _matches(namespace: tuple[str, ...], cond: MatchCondition) -> bool:
    path = _labels(cond.path, "match_conditions.path", empty=True)
    if len(path) > len(namespace):
        return False
    part = (
        namespace[: len(path)]
        if cond.match_type == "prefix"
        else namespace[len(namespace) - len(path) :]
    )
    return all(p == "*" or p == label for p, label in zip(path, part, strict=True))


# --- a graph's trajectory --------------------------------------------------------------


def record_messages(
    memory: Memory, messages: Sequence[BaseMessage], *, namespace: str
) -> list[int]:
    """Store LangChain messages (a graph's ``state["messages"]``) in ``namespace`` of
    the trajectory memory, each once: a message is added under its id (or its place in
    the list when it has none), so recording the growing list after every step stores
    each message a single time; a tool call waits, held, for its result. Returns the
    new step ids."""
    ids: list[int] = []
    for k, (msg, as_dict) in enumerate(
        zip(messages, convert_to_openai_messages(list(messages)), strict=True)
    ):
        if as_dict.get("role") not in ("user", "assistant", "tool", "system"):
            continue
        log_id = f"langgraph:{getattr(msg, 'id', None) or k}"
        ids += memory.add_messages([as_dict], namespace=namespace, log_id=log_id)
    return ids


Namespace = str | Callable[[Mapping[str, Any]], str]


def _namespace_of(namespace: Namespace) -> str:
    if isinstance(namespace, str):
        return namespace
    from langgraph.config import get_config

    return namespace(get_config())


def recording_hook(memory: Memory, *, namespace: Namespace) -> Callable[[Mapping[str, Any]], dict]:
    """A ``post_model_hook`` of ``create_react_agent`` (or a graph node) that records
    the state's messages with :func:`record_messages`. ``namespace``: a name, or a
    function of the run's config (e.g. ``lambda c: c["configurable"]["thread_id"]``)."""
    lock = threading.Lock()

    def hook(state: Mapping[str, Any]) -> dict:
        with lock:
            record_messages(memory, state["messages"], namespace=_namespace_of(namespace))
        return {}

    return hook


def context_hook(
    memory: Memory,
    *,
    namespace: Namespace,
    budget: int | None = None,
    method: str | None = None,
) -> Callable[[Mapping[str, Any]], dict]:
    """A ``pre_model_hook`` of ``create_react_agent``: the model gets, before the
    state's messages, a system message with the past steps retrieved for the latest
    human message (under ``budget`` tokens); the state itself is not changed."""
    lock = threading.Lock()

    def hook(state: Mapping[str, Any]) -> dict:
        messages = list(state["messages"])
        question = next((m for m in reversed(messages) if m.type == "human"), None)
        name = _namespace_of(namespace)
        if question is None or not memory.n_steps(name):
            return {"llm_input_messages": messages}
        with lock:
            found = memory.retrieve(question.text, budget, namespace=name, method=method)
        context = SystemMessage(found.render())
        return {"llm_input_messages": [context, *messages]}

    return hook
