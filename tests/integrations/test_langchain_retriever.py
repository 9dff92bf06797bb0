"""LangChain: ``OSUMemRetriever`` is a real ``BaseRetriever``: a small agent loop (a
chain of the retriever, a prompt and a fake chat model) stores each turn and gets the
retrieved steps back as ``Document``\\ s carrying where they came from, their metadata
and the explanation, sync and async."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain_core")

from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough

from osumem.integrations.langchain import OSUMemRetriever
from osumem.memory import Memory
from serve_helpers import turn

ENC = "hashing:d64"


def test_a_chain_loop_retrieves_documents_with_their_explanation(tmp_path):
    memory = Memory.open(tmp_path / "lc.db", encoder=ENC)
    retriever = OSUMemRetriever(memory=memory, namespace="chat", budget=120)
    assert isinstance(retriever, BaseRetriever)
    prompts: list[str] = []

    def fmt(docs: list[Document]) -> str:
        return "\n".join(d.page_content for d in docs)

    prompt = ChatPromptTemplate.from_messages(
        [("system", "Known:\n{context}"), ("human", "{question}")]
    )
    answers = ["R1 is on HAT001.", "P2 holds R2.", "Paid with a voucher."]
    model = FakeListChatModel(responses=answers)
    chain = {"context": retriever | fmt, "question": RunnablePassthrough()} | prompt | model
    questions = ["Which flight is R1?", "Who holds R2?", "How was R2 paid?"]
    for k, question in enumerate(questions):
        memory.add_messages(turn(k + 1), namespace="chat", metadata={"turn": k + 1})
        value = prompt.invoke({"context": fmt(retriever.invoke(question)), "question": question})
        prompts.append(value.to_string())
        assert chain.invoke(question).content == answers[k]
    assert "R2: flight HAT002" in prompts[-1]  # the model is given the stored turn
    docs = retriever.invoke("reservation R2 voucher")
    assert docs and all(isinstance(d, Document) for d in docs)
    first = docs[0]
    assert first.page_content == memory.steps("chat", ids=[int(first.id)])[0].text
    meta = first.metadata
    assert meta["namespace"] == "chat" and meta["rank"] == 0 and meta["metadata"]["turn"] >= 1
    why = meta["explanation"]
    assert why["position"] == meta["position"] and -1 <= why["cosine"] <= 1
    assert sum(d.metadata["cost"] for d in docs) <= 120
    filtered = OSUMemRetriever(memory=memory, namespace="chat", filter={"turn": 3}, explain=False)
    got = asyncio.run(filtered.ainvoke("reservation"))
    assert got and {d.metadata["metadata"]["turn"] for d in got} == {3}
    assert "explanation" not in got[0].metadata
    memory.close()
