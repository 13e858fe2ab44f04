"""An MCP server built with the SDK, for agentfsm.mcp's tests: ``python -m
tests._mcp_server stdio`` or ``python -m tests._mcp_server http PORT``."""

from __future__ import annotations

import base64
import os
import sys
from typing import Any

import mcp_types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
PDF = base64.b64encode(b"%PDF-1.4 notes").decode()

server = MCPServer("agentfsm-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def shout(text: str, times: int = 1) -> str:
    """Say it loudly."""
    return " ".join([text.upper()] * times)


@server.tool()
def broken(reason: str) -> str:
    """Always fails."""
    raise ToolError(f"broken on purpose: {reason}")


@server.tool()
def picture() -> list[Any]:
    """A caption, a picture and a document."""
    return [
        mcp_types.TextContent(type="text", text="a red dot"),
        mcp_types.ImageContent(type="image", data=PIXEL, mime_type="image/png"),
        mcp_types.EmbeddedResource(
            type="resource",
            resource=mcp_types.BlobResourceContents(
                uri="file:///notes.pdf", mime_type="application/pdf", blob=PDF
            ),
        ),
    ]


NOTES: list[str] = []


@server.tool()
def write_note(text: str) -> str:
    """Write a note (asks for approval in the tests)."""
    NOTES.append(text)
    return f"noted: {text} ({len(NOTES)} notes)"


@server.tool()
def pid() -> int:
    """The server's process id (a test kills it between calls)."""
    return os.getpid()


@server.tool()
def crash() -> str:
    """The server process dies while it answers."""
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
