"""A two-tool agent loop on the scripted model: no key, no network."""

import asyncio

from agentfsm import LLMChain, Message, Ok, tool
from agentfsm.providers import ScriptedModel, call_tool, say


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def main() -> None:
    model = ScriptedModel([call_tool("add", a=2, b=40), say("2 + 40 = 42")])
    chain = LLMChain(model, tools=[add]).add_message(Message.user("What is 2 + 40?"))
    result = await chain.run("while_needs_response")
    assert isinstance(result, Ok)
    for message in result.chain.messages:
        print(f"{message.role:>9}: {said(message)}")


def said(message: Message) -> str:
    """A message as a person reads it: its text, the calls it asks for, or their results."""
    if message.tool_calls:
        return ", ".join(
            f"call {c.name}({', '.join(f'{k}={v!r}' for k, v in c.arguments.items())})"
            for c in message.tool_calls
        )
    if message.tool_results:
        return ", ".join(f"{r.name} -> {r.text}" for r in message.tool_results)
    return message.text


if __name__ == "__main__":
    asyncio.run(main())
