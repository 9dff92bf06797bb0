"""LlamaIndex: ``OSUMemBlock`` is a real ``BaseMemoryBlock``: in a chat loop with a
fake model (``MockLLM``) and LlamaIndex's ``Memory``, the messages flushed out of the
short-term history land in the trajectory memory and every ``get`` puts the steps
retrieved for the latest user message into the prompt."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.llms import MockLLM
from llama_index.core.memory import BaseMemoryBlock
from llama_index.core.memory import Memory as ChatMemory

from osumem.integrations.llamaindex import OSUMemBlock, chat_messages
from osumem.memory import Memory

ENC = "hashing:d64"


def test_a_chat_loop_stores_flushed_messages_and_gets_them_back(tmp_path):
    memory = Memory.open(tmp_path / "li.db", encoder=ENC)
    block = OSUMemBlock(memory=memory, namespace="chat", budget=200)
    assert isinstance(block, BaseMemoryBlock)
    chat = ChatMemory.from_defaults(
        session_id="chat", token_limit=60, chat_history_token_ratio=0.5, memory_blocks=[block]
    )
    llm = MockLLM(max_tokens=6)
    questions = [
        "My booking reference is R77 on flight HAT077.",
        "I paid for R77 with a voucher.",
        "My seat on HAT077 is 14C.",
        "I also need a hotel in Oslo.",
        "Which seat did I get on HAT077?",
    ]

    async def main():
        prompts = []
        for q in questions:
            await chat.aput(ChatMessage(role=MessageRole.USER, content=q))
            history = await chat.aget()
            prompts.append(history)
            reply = await llm.achat(history)
            await chat.aput(reply.message)
        return prompts

    prompts = asyncio.run(main())
    stored = [s.text for s in memory.steps("chat")]
    assert stored and stored[0] == f"user: {questions[0]}"  # flushed out, then kept here
    assert all(t.startswith(("user: ", "assistant: ")) for t in stored)
    system = prompts[-1][0]
    assert system.role == MessageRole.SYSTEM
    assert "trajectory_memory" in system.content and "Retrieved memory" in system.content
    assert "R77" in system.content  # an early, flushed turn, retrieved for the question
    memory.close()


def test_chat_messages_reads_tool_calls_and_results():
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    got = chat_messages(
        [
            ChatMessage(role=MessageRole.SYSTEM, content="be brief"),
            ChatMessage(role=MessageRole.USER, content="hi"),
            ChatMessage(
                role=MessageRole.ASSISTANT, content="", additional_kwargs={"tool_calls": calls}
            ),
            ChatMessage(
                role=MessageRole.TOOL, content="ok", additional_kwargs={"tool_call_id": "c1"}
            ),
        ]
    )
    assert [m["role"] for m in got] == ["user", "assistant", "tool"]
    with Memory.open(None, encoder=ENC) as memory:
        memory.add_messages(got, namespace="t")
        assert [s.text for s in memory.steps("t")] == ["user: hi", "call: f({})\nresult: ok"]
