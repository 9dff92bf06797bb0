"""LangGraph: ``OSUMemStore`` is a real ``BaseStore`` (put/get/search/delete/
list_namespaces and their async twins, namespaces as tuples, filters, limits), a
``create_react_agent`` with a fake chat model stores and recalls through it, and the
hooks record the graph's trajectory and put retrieved context before the model."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph")

import itertools

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.prebuilt import InjectedStore, create_react_agent
from langgraph.store.base import BaseStore, InvalidNamespaceError

from osumem.errors import InvalidInputError
from osumem.integrations.langgraph import (
    NamespaceShapeError,
    OSUMemStore,
    context_hook,
    record_messages,
    recording_hook,
)
from osumem.memory import Memory

ENC = "hashing:d64"


class ToolCallingFake(GenericFakeChatModel):
    """A fake chat model that answers from a script and accepts tools (LangGraph binds
    the agent's tools to the model); it records what it was given."""

    seen: list = []  # noqa: RUF012

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFake:
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        type(self).seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


@pytest.fixture
def store(tmp_path):
    memory = Memory.open(tmp_path / "store.db", encoder=ENC)
    yield OSUMemStore(memory)
    memory.close()


def test_put_get_search_delete_and_namespaces(store):
    assert isinstance(store, BaseStore)
    store.put(("users", "ana"), "seat", {"text": "prefers aisle seats", "kind": "pref", "n": 3})
    store.put(("users", "ana"), "meal", {"text": "vegetarian meals", "kind": "pref", "n": 5})
    store.put(("users", "ana"), "trip", {"text": "flies to Oslo in May", "kind": "plan", "n": 1})
    store.put(("users", "bob"), "seat", {"text": "window seat", "kind": "pref", "n": 2})
    store.put(("docs",), "faq", {"text": "baggage allowance"}, index=False)
    item = store.get(("users", "ana"), "seat")
    assert item.value["text"] == "prefers aisle seats" and item.namespace == ("users", "ana")
    assert item.created_at == item.updated_at
    assert store.get(("users", "ana"), "nothing") is None
    hits = store.search(("users", "ana"), query="aisle seats", limit=2)
    assert 1 <= len(hits) <= 2 and all(h.namespace == ("users", "ana") for h in hits)
    assert hits[0].key == "seat" and hits[0].score is not None
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    prefs = store.search(("users",), filter={"kind": "pref"})
    assert sorted((h.namespace[1], h.key) for h in prefs) == [
        ("ana", "meal"),
        ("ana", "seat"),
        ("bob", "seat"),
    ]
    assert [h.key for h in store.search(("users",), filter={"n": {"$gt": 2}})] == ["meal", "seat"]
    assert store.search(("users",), filter={"missing_field": 1}) == []
    assert len(store.search(("users",), limit=2, offset=3)) == 1
    assert store.search(("docs",), query="baggage") == []  # index=False: not ranked
    assert [h.key for h in store.search(("docs",))] == ["faq"]  # but listed
    store.put(("users", "ana"), "seat", {"text": "now prefers window seats", "kind": "pref"})
    again = store.get(("users", "ana"), "seat")
    assert again.value["text"] == "now prefers window seats" and again.updated_at > item.updated_at
    assert again.created_at == item.created_at
    store.delete(("users", "ana"), "trip")
    assert store.get(("users", "ana"), "trip") is None
    assert store.list_namespaces() == [("docs",), ("users", "ana"), ("users", "bob")]
    assert store.list_namespaces(prefix=("users",)) == [("users", "ana"), ("users", "bob")]
    assert store.list_namespaces(suffix=("bob",)) == [("users", "bob")]
    assert store.list_namespaces(max_depth=1) == [("docs",), ("users",)]
    assert store.list_namespaces(prefix=("users", "*"), limit=1, offset=1) == [("users", "bob")]
    steps = store.memory.steps(store.memory_namespace(("users", "ana")))
    assert [s.metadata["key"] for s in steps] == ["seat", "meal"]  # one step per item


def test_async_twins_and_concurrent_tasks(store):
    async def main():
        await asyncio.gather(
            *(store.aput(("t", str(k % 3)), f"k{k}", {"text": f"fact {k}"}) for k in range(12))
        )
        got = await store.aget(("t", "1"), "k4")
        found = await store.asearch(("t",), query="fact 7", limit=20)
        await store.adelete(("t", "1"), "k4")
        names = await store.alist_namespaces(prefix=("t",))
        return got, found, names, await store.aget(("t", "1"), "k4")

    got, found, names, gone = asyncio.run(main())
    assert got.value == {"text": "fact 4"} and gone is None
    assert len(found) >= 1 and names == [("t", "0"), ("t", "1"), ("t", "2")]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (
            lambda s: s.batch([__import__("langgraph.store.base").store.base.GetOp("users", "k")]),
            "namespace",
        ),
        (lambda s: s.search("users"), "namespace_prefix"),
        (
            lambda s: s.batch(
                [__import__("langgraph.store.base").store.base.PutOp(("a", 3), "k", {})]
            ),
            r"namespace\[1\]",
        ),
        (lambda s: s.put(("a",), "k", ["not", "a", "dict"]), "value"),
        (lambda s: s.put(("a",), "", {}), "key"),
    ],
)
def test_wrong_namespace_shapes_and_values_are_typed(store, call, field):
    with pytest.raises(InvalidInputError, match=field) as info:
        call(store)
    if "namespace" in field:
        assert isinstance(info.value, NamespaceShapeError | InvalidNamespaceError)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # create_react_agent moves in 2.0
def test_a_react_agent_remembers_through_the_store_and_the_hooks(tmp_path):
    memory = Memory.open(tmp_path / "agent.db", encoder=ENC)
    store = OSUMemStore(memory)

    def remember(fact: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
        """Remember a fact about the user."""
        store.put(("facts",), f"f{len(store.search(('facts',), limit=100))}", {"text": fact})
        return "saved"

    def recall(question: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
        """Recall facts about the user."""
        return "; ".join(h.value["text"] for h in store.search(("facts",), query=question, limit=2))

    script = [
        AIMessage(
            "",
            tool_calls=[
                {"name": "remember", "args": {"fact": "Ana is allergic to peanuts"}, "id": "c1"}
            ],
        ),
        AIMessage(
            "", tool_calls=[{"name": "remember", "args": {"fact": "Ana flies to Oslo"}, "id": "c2"}]
        ),
        AIMessage("Noted both."),
        AIMessage(
            "",
            tool_calls=[{"name": "recall", "args": {"question": "allergic peanuts"}, "id": "c3"}],
        ),
        AIMessage("Ana is allergic to peanuts."),
    ]
    ToolCallingFake.seen = []
    model = ToolCallingFake(messages=iter(script))
    agent = create_react_agent(
        model,
        [remember, recall],
        store=store,
        pre_model_hook=context_hook(memory, namespace="chat", budget=200),
        post_model_hook=recording_hook(memory, namespace="chat"),
    )
    first = agent.invoke({"messages": [HumanMessage("Remember: peanuts allergy, Oslo trip")]})
    assert first["messages"][-1].content == "Noted both."
    assert sorted(i.value["text"] for i in store.search(("facts",))) == [
        "Ana flies to Oslo",
        "Ana is allergic to peanuts",
    ]
    second = agent.invoke(
        {"messages": [*first["messages"], HumanMessage("What is Ana allergic to?")]}
    )
    tool_answer = [m for m in second["messages"] if m.type == "tool"][-1]
    assert "allergic to peanuts" in tool_answer.content
    # the trajectory memory holds the conversation, each message once
    steps = memory.steps("chat")
    texts = [s.text for s in steps]
    assert texts.count("user: Remember: peanuts allergy, Oslo trip") == 1
    assert any(t.startswith("call: remember(") and "saved" in t for t in texts)
    assert "assistant: Noted both." in texts
    # the model saw the retrieved trajectory before the second question
    last_input = ToolCallingFake.seen[-1]
    assert last_input[0].type == "system" and "Retrieved memory" in last_input[0].content
    memory.close()


def test_record_messages_stores_each_message_once(tmp_path):
    with Memory.open(None, encoder=ENC) as memory:
        msgs = [HumanMessage("hi", id="m1"), AIMessage("hello", id="m2")]
        assert len(record_messages(memory, msgs, namespace="n")) == 2
        assert record_messages(memory, [*msgs, HumanMessage("bye", id="m3")], namespace="n")
        assert [s.text for s in memory.steps("n")] == ["user: hi", "assistant: hello", "user: bye"]
