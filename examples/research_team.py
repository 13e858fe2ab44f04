"""A research team: a coordinator hands tasks to two subagents, one of them gated.

The coordinator's model calls the ``researcher`` and the ``writer`` as tools
(:class:`~agentfsm.SubAgent`); each does its task on a conversation of its own, and
its final answer is the tool's result. The writer's ``publish`` tool needs a human's
approval: its request interrupts the coordinator, and the decision resumes the
writer where it waited, then the coordinator. The child runs' traces nest under the
coordinator's ``executing`` transitions. Scripted models: no key, no network.

    python examples/research_team.py              # run it
    python examples/research_team.py --diagrams   # redraw examples/research_team/
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path

from agentfsm import (
    STANDARD,
    ActionRequest,
    Agent,
    AgentState,
    HumanInTheLoop,
    Message,
    SubAgent,
    Trace,
    tool,
)
from agentfsm.diagrams import diagram_files, run_mermaid, write_files
from agentfsm.providers import ScriptedModel, call_tool, call_tools, say

FACTS = {
    "dance": "Honeybees tell each other where flowers are by dancing.",
    "colony": "A colony holds one queen and tens of thousands of workers.",
}
published: list[str] = []


@tool
def look_up(topic: str) -> str:
    """Look a topic up in the encyclopedia."""
    return FACTS.get(topic, f"Nothing found on {topic}.")


@tool
def publish(text: str) -> str:
    """Publish a note on the team's page."""
    published.append(text)
    return "Published."


def _researcher(messages: Sequence[Message]) -> Message:
    """Looks both topics up at once, then reports what it found."""
    last = messages[-1]
    if last.role == "user":
        return call_tools(("look_up", {"topic": "dance"}), ("look_up", {"topic": "colony"}))
    return say(" ".join(r.text for r in last.tool_results))


def _writer(messages: Sequence[Message]) -> Message:
    """Publishes the note it was given, then says so."""
    last = messages[-1]
    if last.role == "user":
        return call_tool("publish", text="Bees: " + last.text.split(": ", 1)[-1])
    return say("The note is published.")


def _coordinator(messages: Sequence[Message]) -> Message:
    """Research first, then have the findings written up, then answer the user."""
    last = messages[-1]
    if last.role == "user":
        return call_tool("researcher", task="Find out how honeybees live and talk.")
    done = last.tool_results[0]
    if done.name == "researcher":
        return call_tool("writer", task=f"Publish a short note saying: {done.text}")
    return say(f"Researched and published. Writer: {done.text}")


def team() -> Agent:
    """The coordinator, with its two subagents as tools."""
    researcher = Agent(ScriptedModel(_researcher), [look_up])
    writer = Agent(
        ScriptedModel(_writer), [publish], middleware=[HumanInTheLoop({"publish": True})]
    )
    return Agent(
        ScriptedModel(_coordinator),
        [
            SubAgent("researcher", "Finds facts; give it the whole question.", researcher),
            SubAgent("writer", "Writes and publishes a note; give it the text.", writer),
        ],
        system_prompt="You coordinate a researcher and a writer.",
    )


def show(trace: Trace, indent: str = "") -> None:
    """A run's path, each child run under the state that ran it."""
    print(f"{indent}{trace.machine}: {trace.path}")
    for transition in trace:
        for child in transition.children:
            print(f"{indent}  {transition.source} ran:")
            show(child, indent + "    ")


async def run_team(
    *, verbose: bool = False
) -> tuple[list[Trace], dict[str, list[Trace]], AgentState]:
    """The coordinator's segments (to the approval and after it), each subagent's, and
    the final state; ``verbose`` shows the approval request."""
    coordinator = team()
    run = coordinator.start(AgentState.of("Tell me about honeybees, and publish a note."))
    await run.run()
    state = run.agent_state
    assert state.status == "interrupted" and state.interrupt_data is not None
    (request,) = state.interrupt_data["action_requests"]
    if verbose:
        print(f"{state.interrupt_data['subagent']} asks to {request['tool_name']}:")
        print(f"  {request['arguments']}")
    decision = ActionRequest.of(request).approve()
    resumed = await coordinator.start_resume(state, [decision])
    await resumed.run()
    segments = [run.trace, resumed.trace]
    children: dict[str, list[Trace]] = {"researcher": [], "writer": []}
    for segment in segments:
        for transition in segment:
            for child in transition.children:
                name = "researcher" if "look_up" in _tools_used(child) else "writer"
                children[name].append(child)
    return segments, children, resumed.agent_state


def _tools_used(trace: Trace) -> set[str]:
    """The tools a run ran: the researcher looks things up, the writer publishes."""
    return {name for t in trace.where("executing") for name in (t.detail or {}).get("tools", ())}


async def main() -> None:
    segments, _, state = await run_team(verbose=True)
    for segment in segments:
        show(segment)
    print(f"{state.status}: {state.messages[-1].text}")


HERE = Path(__file__).with_suffix("")


def drawn(*, svg: bool = True) -> dict[str, str]:
    """The coordinator's machine, and the run of each member drawn on it."""
    segments, children, _ = asyncio.run(run_team())
    files = diagram_files(STANDARD, svg=svg)
    files["coordinator.mmd"] = run_mermaid(segments)
    for name, traces in children.items():
        files[f"{name}.mmd"] = run_mermaid(traces)
    return files


def write_diagrams(out: Path = HERE) -> list[str]:
    """Write the drawings that changed; their names."""
    return [path.name for path in write_files(out, drawn())]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--diagrams", action="store_true", help="redraw examples/research_team/")
    if parser.parse_args().diagrams:
        print("wrote", ", ".join(write_diagrams()) or "nothing: all current", "in", HERE)
    else:
        asyncio.run(main())
