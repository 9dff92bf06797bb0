"""A LangChain chain with OSU-Mem as its retriever, offline.

``OSUMemRetriever`` returns the steps the memory retrieves for a question as
``Document``\\ s, with where each came from and why it was chosen (the explanation)
in its metadata; the chain puts them in the prompt of a fake chat model (LangChain's
``FakeListChatModel``: no API key). Needs ``pip install 'osumem[langchain]'``.

Run:  python examples/langchain_retriever.py
"""

from __future__ import annotations

import json

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough

from osumem.integrations.langchain import OSUMemRetriever
from osumem.memory import Memory


def turn(k: int, order: str, status: str) -> list[dict]:
    args = json.dumps({"order_id": order})
    return [
        {"role": "user", "content": f"Where is order {order}?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{k}", "function": {"name": "get_order", "arguments": args}}]},
        {"role": "tool", "tool_call_id": f"c{k}", "content": f"{order}: {status}"},
    ]  # fmt: skip


def main() -> None:
    memory = Memory.open(None, encoder="hashing")
    for k, (order, status) in enumerate(
        [("A-17", "shipped May 2"), ("B-42", "not shipped"), ("C-9", "refunded")]
    ):
        memory.add_messages(turn(k, order, status), namespace="shop", metadata={"order": order})
    retriever = OSUMemRetriever(memory=memory, namespace="shop", budget=60)
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Known:\n{context}"), ("human", "{question}")]
    )
    model = FakeListChatModel(responses=["Order B-42 has not shipped yet."])

    def context(docs: list) -> str:
        return "\n".join(d.page_content for d in docs)

    chain = {"context": retriever | context, "question": RunnablePassthrough()} | prompt | model
    question = "Has order B-42 shipped?"
    for doc in retriever.invoke(question):
        why = doc.metadata["explanation"]
        print(f"[step {doc.metadata['position']}] cosine {why['cosine']:.2f} {doc.page_content!r}")
    print("answer:", chain.invoke(question).content)
    memory.close()


if __name__ == "__main__":
    main()
