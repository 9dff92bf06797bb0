"""An OpenAI Agents SDK agent whose session is OSU-Mem, offline.

``Runner.run(agent, input, session=OSUMemSession(...))``: every turn, tool call and
result is stored in the trajectory memory as it happens, and with ``budget`` the
model gets, instead of the whole history, the latest turn plus what the memory
retrieves for it from everything earlier. The "model" is a scripted fake
implementing the SDK's ``Model`` interface (no network, no API key); pass a real
model name instead. Needs ``pip install 'osumem[openai-agents]'``.

Run:  python examples/openai_agents_session.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from osumem.integrations.openai_agents import OSUMemSession
from osumem.memory import Memory


def say(text: str) -> ResponseOutputMessage:
    part = ResponseOutputText(type="output_text", text=text, annotations=[])
    return ResponseOutputMessage(
        id="m", type="message", role="assistant", status="completed", content=[part]
    )


def call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", name=name, arguments=arguments, call_id=call_id
    )


class ScriptedModel(Model):
    """Answers from a script and shows how many input items each call was given."""

    def __init__(self, script: list[list[Any]]) -> None:
        self.script = script

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        first = input[0] if isinstance(input, list) else {}
        print(f"  model input: {len(input)} items, the first a {first.get('role', 'item')} message")
        return ModelResponse(output=self.script.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
def find_booking(reservation: str) -> str:
    """Look a reservation up."""
    return f"{reservation}: seat 12A on flight HAT042, paid by card"


async def main() -> None:
    memory = Memory.open(None, encoder="hashing")
    session = OSUMemSession("ticket-42", memory, budget=256)
    model = ScriptedModel(
        [
            [call("find_booking", '{"reservation": "R7"}', "c1")],
            [say("You are in seat 12A.")],
            [say("Flight HAT042.")],
            [say("It was paid by card.")],
        ]
    )
    agent = Agent(name="desk", instructions="Help travellers.", model=model, tools=[find_booking])
    offline = RunConfig(tracing_disabled=True)
    for question in ["What seat do I have on R7?", "Which flight is it?", "How did I pay for R7?"]:
        print(f"user: {question}")
        result = await Runner.run(agent, question, session=session, run_config=offline)
        print(f"agent: {result.final_output}")
    print(f"trajectory memory holds {memory.n_steps(session.namespace)} steps")
    memory.close()


if __name__ == "__main__":
    asyncio.run(main())
