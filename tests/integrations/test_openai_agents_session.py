"""OpenAI Agents SDK: ``OSUMemSession`` is a ``Session`` that ``Runner.run`` uses; an
agent loop with a fake model (the SDK's ``Model`` interface, no network) stores every
turn, tool call and result in the trajectory memory, and a budgeted session hands the
model the retrieved context plus the latest turn; pop_item and clear_session keep the
memory in step with the history."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.memory import Session
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from osumem.errors import InvalidInputError
from osumem.integrations.openai_agents import OSUMemSession, items_to_messages
from osumem.memory import Memory

ENC = "hashing:d64"
OFFLINE = RunConfig(tracing_disabled=True)


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="m", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )  # fmt: skip


def call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", name=name, arguments=arguments, call_id=call_id, id=call_id
    )


class ScriptModel(Model):
    """A fake model: answers from a script, records every input it was given."""

    def __init__(self, script: list[list[Any]]) -> None:
        self.script = list(script)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions, input, *args: Any, **kwargs: Any):
        self.inputs.append(input)
        return ModelResponse(output=self.script.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any):  # pragma: no cover - not used
        raise NotImplementedError


@function_tool
def find_booking(reservation: str) -> str:
    """Look a reservation up."""
    return f"{reservation}: seat 12A on flight HAT042"


def test_runner_runs_with_the_session_and_the_memory_records_the_turns(tmp_path):
    memory = Memory.open(tmp_path / "agents.db", encoder=ENC)
    session = OSUMemSession("ticket-1", memory)
    assert isinstance(session, Session)
    model = ScriptModel(
        [
            [call("find_booking", '{"reservation": "R7"}', "c1")],
            [say("Your seat is 12A.")],
            [say("You are on flight HAT042.")],
        ]
    )
    agent = Agent(name="desk", instructions="Help travellers.", model=model, tools=[find_booking])

    async def main():
        first = await Runner.run(
            agent, "What seat do I have on R7?", session=session, run_config=OFFLINE
        )
        second = await Runner.run(agent, "And which flight?", session=session, run_config=OFFLINE)
        return first, second, await session.get_items()

    first, second, items = asyncio.run(main())
    assert (first.final_output, second.final_output) == (
        "Your seat is 12A.",
        "You are on flight HAT042.",
    )
    texts = [s.text for s in memory.steps(session.namespace)]
    assert texts == [
        "user: What seat do I have on R7?",
        'call: find_booking({"reservation":"R7"})\nresult: R7: seat 12A on flight HAT042',
        "assistant: Your seat is 12A.",
        "user: And which flight?",
        "assistant: You are on flight HAT042.",
    ]
    assert [m["role"] for m in items_to_messages(items)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    # the second run's model input held the whole first turn (budget=None: the history)
    assert any("12A" in str(i) for i in model.inputs[-1])
    memory.close()


def test_a_budgeted_session_gives_the_model_the_retrieved_context(tmp_path):
    memory = Memory.open(tmp_path / "agents.db", encoder=ENC)
    session = OSUMemSession("ticket-2", memory, budget=200)
    model = ScriptModel(
        [
            [call("find_booking", '{"reservation": "R7"}', "c1")],
            [say("Seat 12A.")],
            [say("HAT042.")],
            [say("Window seats are booked out.")],
        ]
    )
    agent = Agent(name="desk", model=model, tools=[find_booking])
    questions = ["What seat do I have on R7?", "Which flight is R7 on?", "Can I change seats?"]

    async def main():
        for q in questions:
            await Runner.run(agent, q, session=session, run_config=OFFLINE)
        return await session.get_items(), await session.history.get_items()

    budgeted, history = asyncio.run(main())
    context, *turn = budgeted
    assert context["role"] == "system" and "Retrieved memory" in context["content"]
    assert "seat 12A on flight HAT042" in context["content"]  # the first turn, retrieved
    assert turn == history[-len(turn) :] and turn[0]["content"] == questions[2]
    second, third = model.inputs[2], model.inputs[3]
    assert second[0] == {"role": "user", "content": questions[0]}  # nothing before turn 1
    # the third run's model saw the first turn through the memory, the second as it was
    assert third[0]["role"] == "system" and "find_booking" in third[0]["content"]
    assert [i.get("content") for i in third if i.get("role") == "user"] == questions[1:]
    assert len(third) < len(history)
    memory.close()


def test_pop_item_and_clear_session_keep_the_memory_with_the_history(tmp_path):
    memory = Memory.open(tmp_path / "agents.db", encoder=ENC)
    session = OSUMemSession("ticket-3", memory)

    async def main():
        await session.add_items([{"role": "user", "content": "book R1"}])
        await session.add_items(
            [
                {
                    "type": "function_call",
                    "call_id": "c",
                    "name": "book",
                    "arguments": '{"r": "R1"}',
                },
                {"type": "function_call_output", "call_id": "c", "output": "booked"},
                {"type": "reasoning", "id": "rs", "summary": []},
                {"role": "user", "content": [{"type": "input_text", "text": "oops, not R1"}]},
            ]
        )
        before = [s.text for s in memory.steps(session.namespace)]
        popped = await session.pop_item()
        after = [s.text for s in memory.steps(session.namespace)]
        limited = await session.get_items(limit=2)
        await session.clear_session()
        return before, popped, after, limited, await session.get_items()

    before, popped, after, limited, cleared = asyncio.run(main())
    assert before[-1] == "user: oops, not R1" and popped["content"][0]["text"] == "oops, not R1"
    assert after == before[:-1] and len(limited) == 2 and limited[-1]["type"] == "reasoning"
    assert cleared == [] and memory.n_steps(session.namespace) == 0
    memory.close()


def test_bad_arguments_are_typed(tmp_path):
    with Memory.open(None, encoder=ENC) as memory:
        with pytest.raises(InvalidInputError, match="session_id"):
            OSUMemSession("", memory)
        with pytest.raises(InvalidInputError, match="memory"):
            OSUMemSession("x", "not a memory")  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match=r"items\[0\]: a function_call"):
            items_to_messages([{"type": "function_call", "name": "x"}])
