"""A tool that asks the user a question, and the middleware that resumes it with the answer.

The tool interrupts the run; ``agent.resume(state, answer)`` hands the answer to
the middleware that owns the interrupt, which turns it into the tool's result.
The run re-enters the machine at ``propagating`` and the model reads the answer
on its next call. Scripted model: no key, no network.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agentfsm import Agent, AgentState, Message, Middleware, ToolOutput, ToolResult, tool
from agentfsm.providers import ScriptedModel, call_tool, say


@tool
def ask_user(question: str) -> ToolOutput:
    """Ask the user a question and wait for the answer."""
    return ToolOutput(
        "Waiting for the user's answer.", interrupt={"type": "ask_user", "question": question}
    )


class AskUser(Middleware):
    """Resumes ``ask_user`` interrupts: the user's answer becomes the tool's result."""

    async def handle_resume(
        self, agent: Agent, state: AgentState, answer: Any
    ) -> AgentState | None:
        data = state.interrupt_data or {}
        if data.get("type") != "ask_user":
            return None  # another middleware's interrupt
        if not isinstance(answer, str) or not answer.strip():
            raise ValueError(f"An ask_user answer is the user's reply as text, got: {answer!r}")
        result = ToolResult(data["tool_call_id"], "ask_user", f"The user answered: {answer}")
        return state.replace_tool_result(result)


def reply(messages: Sequence[Message]) -> Message:
    """The scripted model: ask once, then answer from what the user said."""
    last = messages[-1]
    if last.role != "tool":
        return call_tool("ask_user", question="Which database should the project use?")
    return say(f"Setting the project up with {last.tool_results[0].text.rsplit(': ', 1)[-1]}.")


async def main() -> None:
    agent = Agent(ScriptedModel(reply), [ask_user], middleware=[AskUser()])
    state = await agent.execute(AgentState.of("Set up the project"))
    assert state.status == "interrupted" and state.interrupt_data is not None
    print(f"the agent asks: {state.interrupt_data['question']!r}")

    state = await agent.resume(state, "PostgreSQL")
    print(f"{state.status}: {state.messages[-1].text!r}")


if __name__ == "__main__":
    asyncio.run(main())
