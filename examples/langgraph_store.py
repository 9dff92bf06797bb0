"""A LangGraph agent with OSU-Mem as its store and its trajectory memory, offline.

``create_react_agent(..., store=OSUMemStore(memory))``: the agent's tools keep facts
in the store (``put``) and look them up (``search``, ranked by the memory), and two
hooks record the graph's messages in the trajectory memory and put the steps
retrieved for each question before the model. The "model" is a scripted fake chat
model (LangChain's ``GenericFakeChatModel``), so it runs without an API key; pass a
real chat model instead. Needs ``pip install 'osumem[langgraph]'``.

Run:  python examples/langgraph_store.py
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.prebuilt import InjectedStore, create_react_agent
from langgraph.store.base import BaseStore

from osumem.integrations.langgraph import OSUMemStore, context_hook, recording_hook
from osumem.memory import Memory


class ScriptedModel(GenericFakeChatModel):
    """Answers from a script; takes the tools LangGraph binds to it."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def remember(fact: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Remember a fact about the traveller."""
    n = len(store.search(("traveller", "ana"), limit=1000))
    store.put(("traveller", "ana"), f"fact-{n}", {"text": fact})
    return "saved"


def recall(question: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Recall facts about the traveller."""
    hits = store.search(("traveller", "ana"), query=question, limit=2)
    return "; ".join(h.value["text"] for h in hits)


def main() -> None:
    warnings.simplefilter("ignore", DeprecationWarning)  # create_react_agent moves in 2.0
    memory = Memory.open(None, encoder="hashing")
    store = OSUMemStore(memory)
    script = [
        AIMessage("", tool_calls=[{"name": "remember", "args": {"fact": "Ana prefers aisle seats"}, "id": "1"}]),
        AIMessage("", tool_calls=[{"name": "remember", "args": {"fact": "Ana is vegetarian"}, "id": "2"}]),
        AIMessage("Noted."),
        AIMessage("", tool_calls=[{"name": "recall", "args": {"question": "aisle seats"}, "id": "3"}]),
        AIMessage("Ana prefers aisle seats."),
    ]  # fmt: skip
    agent = create_react_agent(
        ScriptedModel(messages=iter(script)),
        [remember, recall],
        store=store,
        pre_model_hook=context_hook(memory, namespace="chat-ana", budget=200),
        post_model_hook=recording_hook(memory, namespace="chat-ana"),
    )
    state = agent.invoke({"messages": [HumanMessage("I like aisle seats and I am vegetarian.")]})
    state = agent.invoke({"messages": [*state["messages"], HumanMessage("Where do I sit?")]})
    print("answer:", state["messages"][-1].content)
    print("store:", sorted(i.value["text"] for i in store.search(("traveller", "ana"))))
    print(f"trajectory memory holds {memory.n_steps('chat-ana')} steps")
    memory.close()


if __name__ == "__main__":
    main()
