"""The agents of ``agentfsm demo`` and ``agentfsm run``.

``demo_agent`` is a note-taking assistant on the scripted model: it searches
notes, reads two of them at once, and asks to write a summary; writing needs a
human's approval, so every demo run stops at ``interrupted`` and is resumed
with the decision. The model is scripted (no network, no key), with a short
delay per call so a live view has something to show.

``calculator_agent`` has safe tools only (arithmetic, the time) for any model.
"""

from __future__ import annotations

import datetime
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ._agent import Agent
from ._messages import Message
from ._middleware.human_in_the_loop import HumanInTheLoop
from ._tools import Tool, ToolOutput, tool
from .providers import ScriptedModel, call_tool, call_tools, say

if TYPE_CHECKING:
    from agentfsm._chat_model import ChatModel

__all__ = ["DEMO_PROMPT", "NOTES", "calculator_agent", "demo_agent", "file_writer"]

DEMO_PROMPT = "Summarise my notes on state machines into summary.md."

#: The notes the demo's tools search and read.
NOTES: Mapping[str, str] = {
    "fsm-basics": "A finite-state machine is a set of states and the transitions between them; "
    "it is in exactly one state at a time.",
    "agent-loops": "An agent loop calls the model, runs the tools it asks for, and calls the "
    "model again until it answers.",
    "groceries": "Milk, eggs, coffee.",
}

SUMMARY = (
    "# State machines\n\n"
    "- A finite-state machine is in one state at a time and moves along transitions.\n"
    "- An agent loop is such a machine: call the model, run its tools, repeat until it answers.\n"
)


@tool
def search_notes(query: str) -> list[str]:
    """Find the titles of the notes that mention any word of the query.

    Args:
        query: words to look for
    """
    words = {w.lower().strip("s") for w in query.split()}
    return [
        title
        for title, text in NOTES.items()
        if any(w and w in (title + " " + text).lower() for w in words)
    ]


@tool
def read_note(title: str) -> str:
    """Read one note by its title.

    Args:
        title: the note's title, as search_notes returns it
    """
    if title not in NOTES:
        raise KeyError(f"no note titled {title!r}; titles: {sorted(NOTES)}")
    return NOTES[title]


def file_writer(folder: str | os.PathLike[str] = ".") -> Tool:
    """The demo's ``write_file`` tool: writes a new file into ``folder``, never elsewhere.

    It needs approval, so it does what it says: the file is on disk afterwards.
    A name with a folder in it, or one that exists already, is refused.
    """
    root = pathlib.Path(folder)

    @tool(display_text="Write a file")
    def write_file(path: str, content: str) -> ToolOutput:
        """Write a new text file.

        Args:
            path: the file's name (no folders)
            content: the text to write
        """
        name = pathlib.PurePath(path).name
        if not name or name != path or name in (".", ".."):
            raise ValueError(f"{path!r} is not a plain file name")
        target = root / name
        with target.open("x", encoding="utf-8") as file:  # "x": never overwrite
            file.write(content)
        return ToolOutput(
            f"Wrote {len(content)} characters to {target}.",
            state_updates={"files": {name: len(content)}},
        )

    return write_file


def _script(messages: Sequence[Message]) -> Message:
    """The model's next reply, from how far the conversation has got."""
    replies = sum(m.role == "assistant" for m in messages)
    if replies == 0:
        return call_tool("search_notes", query="state machine")
    if replies == 1:
        return call_tools(
            ("read_note", {"title": "fsm-basics"}),
            ("read_note", {"title": "agent-loops"}),
            text="Two notes match; reading both.",
        )
    if replies == 2:
        return call_tool("write_file", path="summary.md", content=SUMMARY)
    last = messages[-1]
    (result,) = last.tool_results if last.role == "tool" else (None,)
    if result is not None and "rejected by a human reviewer" in result.text:
        return say(
            "Understood, I did not write summary.md. Here is the summary instead:\n\n" + SUMMARY
        )
    if result is None or result.is_error:
        why = result.text if result is not None else "no result"
        return say(f"I could not write summary.md ({why}). Here is the summary:\n\n" + SUMMARY)
    return say("I wrote summary.md with a two-point summary of your notes on state machines.")


def demo_agent(
    *, delay: float = 0.08, stream: bool = True, folder: str | os.PathLike[str] = "."
) -> Agent:
    """The demo agent; ``delay`` seconds per model call, replies streamed word by word.

    Its ``write_file`` (approval needed) writes into ``folder``.
    """
    model = ScriptedModel(_script, model_name="scripted-demo", stream=stream, delay=delay)
    return Agent(
        model,
        [search_notes, read_note, file_writer(folder)],
        middleware=[HumanInTheLoop({"write_file": {"allowed_decisions": ["approve", "reject"]}})],
        system_prompt="You are a careful note-taking assistant.",
    )


# ---------------------------------------------------------------- agentfsm run


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


@tool
def current_time() -> str:
    """The current local date and time, ISO 8601, to the second."""
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def calculator_agent(model: ChatModel, *, max_runs: int = 10) -> Agent:
    """A small agent with safe tools only (arithmetic, the time), for ``agentfsm run``."""
    return Agent(
        model,
        [add, multiply, current_time],
        system_prompt=(
            "You are a helpful assistant. Use the tools for arithmetic and for the current "
            "time; answer briefly."
        ),
        max_runs=max_runs,
    )
