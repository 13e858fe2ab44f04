"""A tool that asks the user a question; the answer becomes the tool's result.

The tool interrupts the run at ``propagating``; ``agent.resume(state, answer)``
enters the machine there again with the answer, which becomes the tool's result,
and the model reads it on its next call. Scripted model: no key, no network.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agentfsm import Agent, AgentState, Message, ToolOutput, tool
from agentfsm.providers import ScriptedModel, call_tool, say


@tool
def ask_user(question: str) -> ToolOutput:
    """Ask the user a question and wait for the answer."""
    return ToolOutput(
        "Waiting for the user's answer.", interrupt={"type": "ask_user", "question": question}
    )


def reply(messages: Sequence[Message]) -> Message:
    """The scripted model: ask once, then answer from what the user said."""
    last = messages[-1]
    if last.role != "tool":
        return call_tool("ask_user", question="Which database should the project use?")
    return say(f"Setting the project up with {last.tool_results[0].text}.")


async def main() -> None:
    agent = Agent(ScriptedModel(reply), [ask_user])
    state = await agent.execute(AgentState.of("Set up the project"))
    assert state.status == "interrupted" and state.interrupt_data is not None
    print(f"the agent asks: {state.interrupt_data['question']!r} (at {state.interrupted_at})")

    state = await agent.resume(state, "PostgreSQL")
    print(f"{state.status}: {state.messages[-1].text!r}")


if __name__ == "__main__":
    asyncio.run(main())
