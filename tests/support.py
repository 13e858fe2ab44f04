"""Shared test helpers: small tools and agents on the scripted model."""

from __future__ import annotations

from typing import Any

from agentfsm import LLMChain, Message, ToolOutput, tool
from agentfsm.providers import ScriptedModel

LOOP = "expanding calling interrupt_check executing propagating until_check deciding"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def submit(answer: str) -> str:
    """Submit the final answer."""
    if answer == "bad":
        raise ValueError("answer rejected")
    return f"submitted {answer}"


@tool
def search(q: str) -> str:
    """Search the notes."""
    return f"results for {q}"


@tool
def boom() -> str:
    """Always fails."""
    raise RuntimeError("kaput")


@tool
def remember(key: str, value: Any) -> ToolOutput:
    """Store a value in the agent state."""
    return ToolOutput(f"remembered {key}", state_updates={key: value})


def chain_of(model: ScriptedModel, *tools: Any, prompt: str = "go") -> LLMChain:
    return LLMChain(model, tools=tools).add_message(Message.user(prompt))


def texts(chain: LLMChain) -> list[tuple[str, str]]:
    """(role, text or tool summary) of every message: what the test reads."""
    out = []
    for m in chain.messages:
        if m.tool_results:
            out.append((m.role, "|".join(str(r.content) for r in m.tool_results)))
        elif m.tool_calls:
            out.append((m.role, "calls:" + ",".join(c.name for c in m.tool_calls)))
        else:
            out.append((m.role, m.text))
    return out
