"""Chat with an agent in the browser over AG-UI: python examples/serve_chat.py

The page (examples/serve_chat/index.html, plain HTML and JS) streams the agent's reply,
draws each transition of its machine as it is taken, and asks for approval before the
agent deletes a file. The runs are saved in serve_chat.db: `agentfsm studio --db
serve_chat.db` shows them.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse

from agentfsm import Agent, HumanInTheLoop, Message, tool
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.serve import create_app, serve

PAGE = pathlib.Path(__file__).with_name("serve_chat") / "index.html"


@tool
def delete_file(path: str) -> str:
    """Delete a file (pretend)."""
    return f"deleted {path}"


def reply(messages: Sequence[Message]) -> Any:
    """The scripted model: asks to delete what the user names, then reports."""
    last = messages[-1]
    if last.role == "tool":
        return say(f"Done: {last.tool_results[0].text}.")
    words = last.text.split()
    if words and words[0].lower() == "delete" and len(words) > 1:
        return call_tool("delete_file", path=words[1])
    return say(f"You said: {last.text}. Ask me to delete a file.")


def make_app(db: str = "serve_chat.db", *, delay: float = 0.0) -> Starlette:
    """The agent's AG-UI app, with the chat page at GET /."""
    model = ScriptedModel(reply, stream=True, delay=delay)
    agent = Agent(model, [delete_file], middleware=[HumanInTheLoop({"delete_file": True})])
    app = create_app(agent, db)

    async def page(_: Request) -> HTMLResponse:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    app.add_route("/", page, methods=["GET"])
    return app


if __name__ == "__main__":
    serve(make_app(delay=0.3))
