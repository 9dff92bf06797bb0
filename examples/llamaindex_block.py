"""A LlamaIndex chat memory with an OSU-Mem memory block, offline.

LlamaIndex keeps the recent chat in its short-term history; what it flushes out goes
to the ``OSUMemBlock``, which stores it in the trajectory memory and, at every
``get``, puts the steps retrieved for the latest user message into the prompt. The
"model" is LlamaIndex's ``MockLLM`` (no API key). Needs
``pip install 'osumem[llamaindex]'``.

Run:  python examples/llamaindex_block.py
"""

from __future__ import annotations

import asyncio

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.llms import MockLLM
from llama_index.core.memory import Memory as ChatMemory

from osumem.integrations.llamaindex import OSUMemBlock
from osumem.memory import Memory


async def main() -> None:
    memory = Memory.open(None, encoder="hashing")
    block = OSUMemBlock(memory=memory, namespace="chat-7", budget=120)
    chat = ChatMemory.from_defaults(
        session_id="chat-7", token_limit=60, chat_history_token_ratio=0.5, memory_blocks=[block]
    )
    llm = MockLLM(max_tokens=5)
    for text in [
        "My booking reference is R77 on flight HAT077.",
        "I paid for it with a voucher.",
        "I also need a hotel in Oslo for two nights.",
        "Which flight was my booking R77 on?",
    ]:
        await chat.aput(ChatMessage(role=MessageRole.USER, content=text))
        prompt = await chat.aget()
        reply = await llm.achat(prompt)
        await chat.aput(reply.message)
    system = prompt[0].content if prompt[0].role == MessageRole.SYSTEM else ""
    print("the last prompt's memory section:")
    print("\n".join(line for line in system.splitlines() if line.startswith(("#", "[step"))))
    print(f"trajectory memory holds {memory.n_steps('chat-7')} steps")
    memory.close()


if __name__ == "__main__":
    asyncio.run(main())
