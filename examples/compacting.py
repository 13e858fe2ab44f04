"""A machine of your own: the standard loop with a ``compacting`` state.

Before each model call, ``compacting`` folds a long history into one summary
message (the model writes it), keeping the latest messages as they are. The
machine is the standard table with one state inserted after ``expanding``, whose
edge on to ``calling`` now leads through it; it gets stepping, traces, path
assertions, diagrams and checkpoints like the standard one.

    python examples/compacting.py              # run it on the scripted model
    python examples/compacting.py --diagrams   # redraw examples/compacting/
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    ChainError,
    Edge,
    Failed,
    LLMChain,
    Message,
    effects,
    tool,
)
from agentfsm.diagrams import diagram_files
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.steps import Continue, PipelineResult, Step

SUMMARIZE = (
    "Summarize the conversation below for the assistant that continues it: the user's "
    "request, the facts found so far, and what is left to do. Be brief."
)
SUMMARY_PREFIX = "Summary of the conversation so far:\n"


def compact_history(*, over: int = 10, keep: int = 4) -> Step:
    """A step that, once the conversation holds more than ``over`` messages (the
    system prompt aside), replaces all but about the last ``keep`` with a summary."""

    @effects("model")  # it asks the model for the summary
    async def compact(result: PipelineResult, opts: Mapping[str, Any] | None) -> PipelineResult:
        if not isinstance(result, Continue):
            return result
        chain = result.chain
        system = [m for m in chain.messages[:1] if m.role == "system"]
        body = list(chain.messages[len(system) :])
        if len(body) <= over:
            return result
        cut = len(body) - keep
        while cut > 0 and body[cut].role == "tool":
            cut -= 1  # a tool message stays with the call it answers
        if cut <= 1:
            return result
        transcript = "\n".join(f"{m.role}: {m.text or _calls(m)}" for m in body[:cut])
        try:
            reply = await chain.llm.complete(
                [Message.system(SUMMARIZE), Message.user(transcript)], ()
            )
        except ChainError as error:
            return Failed(chain, error)
        summary = Message.user(SUMMARY_PREFIX + reply.text)
        return Continue(attrs.evolve(chain, messages=(*system, summary, *body[cut:])))

    return compact


def _calls(message: Message) -> str:
    calls = [f"{c.name}({c.arguments})" for c in message.tool_calls]
    results = [f"{r.name} -> {r.text}" for r in message.tool_results]
    return "; ".join(calls + results)


def _compacted(chain: LLMChain, result: PipelineResult) -> Mapping[str, Any] | None:
    """The compacting transition records how many messages the summary replaced."""
    folded = len(chain.messages) - len(result.chain.messages) + 1
    return {"summarized": folded} if folded > 1 else None


COMPACTING = STANDARD.insert(
    "compacting",
    (compact_history(over=6, keep=4),),
    after="expanding",
    name="compacting",
    trigger="compacted",
    why="a long history is summarized; a short one goes on as it is",
    detail=_compacted,
    edges=(
        Edge("compacting", "error", on=Failed, trigger="failed", why="the summary call failed"),
    ),
)


# ---------------------------------------------------------------- a demo agent

CITIES = ("Lisbon", "Oslo", "Cairo", "Lima", "Hanoi")


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"{city}: {len(city) * 4} C, clear"


def scripted_model() -> ScriptedModel:
    """Asks for the weather city by city, answers; writes summaries when asked."""
    asked = iter(CITIES)

    def reply(messages: Sequence[Message]) -> Message:
        if messages[0].text == SUMMARIZE:
            found = [line for line in messages[1].text.splitlines() if "weather ->" in line]
            return say(f"The user wants the weather in {len(CITIES)} cities; found: {found}")
        city = next(asked, None)
        if city is None:
            return say("Warmest today: Hanoi and Lisbon.")
        return call_tool("weather", city=city)

    return ScriptedModel(reply)


def agent() -> Agent:
    return Agent(
        scripted_model(),
        [weather],
        system_prompt="You look up the weather.",
        machine=COMPACTING,
    )


async def main() -> None:
    run = agent().start(AgentState.of(f"Which of {', '.join(CITIES)} is warmest today?"))
    async for t in run:
        note = f"  {t.detail}" if t.source == "compacting" and t.detail else ""
        print(f"{t.source:>15} --{t.trigger}--> {t.dest}{note}")
    print(run.agent_state.messages[-1].text)


HERE = Path(__file__).with_suffix("")


def drawn(*, svg: bool = True) -> dict[str, str]:
    """The machine's diagrams by file name, as ``agentfsm diagrams`` draws the standard one."""
    return diagram_files(COMPACTING, svg=svg)


def write_diagrams(out: Path = HERE) -> list[str]:
    out.mkdir(exist_ok=True)
    files = drawn()
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return sorted(files)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--diagrams", action="store_true", help="redraw examples/compacting/")
    if parser.parse_args().diagrams:
        print("wrote", ", ".join(write_diagrams()), "in", HERE)
    else:
        asyncio.run(main())
