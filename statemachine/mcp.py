"""An MCP server's tools as agentfsm tools (``pip install 'agentfsm[mcp]'``).

::

    from agentfsm.mcp import mcp_tools, stdio

    async with mcp_tools(stdio("python", "server.py"), prefix="files_") as tools:
        agent = Agent(model, tools)
        state = await agent.run(AgentState.of("..."))

The connection lives as long as the ``async with``: it opens before the tools
are listed and closes, the server's process with it, when the block ends. A
server is a URL (streamable HTTP), :func:`stdio` parameters, a
:class:`StreamableHTTP` with headers, or anything ``mcp.Client`` takes (a
transport, an in-process server). Each tool keeps the server's input schema as
it is given; a call's result comes back as content parts (text, images,
files), and a result the server marks as an error, or a call that fails, is an
error result the model reads. A server that goes away (its process dies, its
port closes) fails the calls made to it as error results naming it, over stdio
and HTTP alike; the run goes on, and leaving the ``async with`` raises nothing.
Tools are plain :class:`~agentfsm.tools.Tool` values, so middleware such as
approval works on them as on any other.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, TypeAlias

import attrs
import httpx2
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client import Transport
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer

from ._messages import ContentPart
from ._tools import Tool, ToolOutput

__all__ = [
    "MCPServerSpec",
    "StreamableHTTP",
    "ToolFilter",
    "mcp_tools",
    "result_content",
    "stdio",
    "tools_of",
]

#: Which of a server's tools to offer: their names, or a test of each tool.
ToolFilter: TypeAlias = Collection[str] | Callable[[mcp_types.Tool], bool]

#: Seconds an HTTP connection may take to open, and a call's reply to come.
_CONNECT_SECONDS = 30.0
_READ_SECONDS = 300.0
#: Pages of a tool listing read at most (a server whose pages never end stops here).
_MAX_PAGES = 100


@attrs.frozen
class StreamableHTTP:
    """An MCP server over streamable HTTP, with headers (a key) sent on each request."""

    url: str
    headers: Mapping[str, str] = attrs.field(factory=dict)


MCPServerSpec: TypeAlias = (
    str | StreamableHTTP | StdioServerParameters | Transport | Server[Any] | MCPServer
)


def stdio(
    command: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> StdioServerParameters:
    """A server run as a child process, spoken to over its stdin and stdout."""
    return StdioServerParameters(
        command=command,
        args=list(args),
        env=None if env is None else dict(env),
        cwd=cwd,
    )


@asynccontextmanager
async def mcp_tools(
    server: MCPServerSpec,
    *,
    tool_filter: ToolFilter | None = None,
    prefix: str = "",
    timeout: float | None = None,
) -> AsyncIterator[list[Tool]]:
    """Connect to ``server`` and yield its tools; the connection closes on exit.

    ``tool_filter`` keeps some of the tools (names, or a test of each
    ``mcp.types.Tool``); ``prefix`` goes before each name the model sees (the
    server is called with its own). ``timeout`` bounds each call, in seconds.
    """
    label = _label(server)
    async with AsyncExitStack() as stack:
        if isinstance(server, str):
            server = StreamableHTTP(server)
        if isinstance(server, StreamableHTTP):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(server.headers),
                    timeout=httpx2.Timeout(_CONNECT_SECONDS, read=_READ_SECONDS),
                    transport=_Answering(httpx2.AsyncHTTPTransport(), label),
                )
            )
            target: Any = streamable_http_client(server.url, http_client=http)
        else:
            target = server
        client = await stack.enter_async_context(Client(target))
        yield await tools_of(
            client, tool_filter=tool_filter, prefix=prefix, timeout=timeout, server=label
        )


def _label(server: MCPServerSpec) -> str:
    """How an error result names ``server``: its URL (no credentials, no query), the
    command that runs it, or its name."""
    if isinstance(server, StreamableHTTP):
        server = server.url
    if isinstance(server, str):
        url = httpx2.URL(server)
        return str(url.copy_with(username=None, password=None, query=None, fragment=None))
    if isinstance(server, StdioServerParameters):
        return shlex.join([server.command, *server.args])
    name = getattr(server, "name", None)
    return name if isinstance(name, str) and name else type(server).__name__


class _Answering(httpx2.AsyncBaseTransport):
    """The HTTP transport under a streamable HTTP connection: a request the server
    never answers (refused, reset, dropped mid-reply, timed out) is answered here, with
    the JSON-RPC error a server sends at a 503, so the SDK fails that one request.

    The SDK posts each request in a task of the connection's task group, and a
    transport error raised there would cancel the whole group, the host's code
    inside the ``async with`` (the run) with it. Over stdio a dead server fails the
    pending request instead; this makes HTTP do the same."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, server: str) -> None:
        self._inner = inner
        self._server = server

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            return self._unanswered(request, exc)
        response.stream = _Guarded(response.stream)
        return response

    def _unanswered(self, request: httpx2.Request, exc: Exception) -> httpx2.Response:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        error = {"code": _UNANSWERED, "message": f"no answer over HTTP ({why})"}
        body = {"jsonrpc": "2.0", "id": None, "error": error}
        return httpx2.Response(503, json=body, request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


#: The JSON-RPC error code of a request the server never answered (the SDK's own
#: "connection closed" code, as a dead stdio server gives).
_UNANSWERED = -32000


class _DroppedError(httpx2.StreamError):
    """A reply cut off by the server going away: a stream error, which the SDK turns
    into an error for the one request it answered."""


class _Guarded(httpx2.AsyncByteStream):
    """A reply's body whose transport error, should the server go away halfway, is
    raised as a :class:`_DroppedError`."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx2.TransportError as exc:
            raise _DroppedError(f"the reply was cut off ({type(exc).__name__}: {exc})") from exc

    async def aclose(self) -> None:
        await self._inner.aclose()


async def tools_of(
    client: Client,
    *,
    tool_filter: ToolFilter | None = None,
    prefix: str = "",
    timeout: float | None = None,
    server: str | None = None,
) -> list[Tool]:
    """The tools of a connected ``mcp.Client``, every page of its listing read; for
    a connection you open and close yourself. ``server`` names the server in the
    error result of a call that fails (default: the name it gave when connecting)."""
    if server is None:
        info = client.server_info
        server = info.name if info is not None and info.name else "server"
    listed: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        listed.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    keep = _keeper(tool_filter)
    return [_tool(client, item, prefix, timeout, server) for item in listed if keep(item)]


def _keeper(tool_filter: ToolFilter | None) -> Callable[[mcp_types.Tool], bool]:
    if tool_filter is None:
        return lambda _: True
    if callable(tool_filter):
        return tool_filter
    if isinstance(tool_filter, str):
        raise TypeError(f"tool_filter takes a collection of names, got the string {tool_filter!r}")
    names = frozenset(tool_filter)
    return lambda item: item.name in names


def _tool(
    client: Client, item: mcp_types.Tool, prefix: str, timeout: float | None, server: str
) -> Tool:
    """One server tool as an agentfsm tool: the server's schema, a call through ``client``."""
    name = item.name

    async def call(**arguments: Any) -> ToolOutput:
        try:
            result = await client.call_tool(name, arguments, read_timeout_seconds=timeout)
        except Exception as exc:  # the call failed on the way: the connection's, not the tool's
            why = str(exc) or type(exc).__name__
            return ToolOutput(
                f"The MCP server {server} failed the call to {name}: {why}",
                is_error=True,
            )
        return ToolOutput(content=result_content(result), is_error=result.is_error)

    call.__name__ = name
    return Tool(
        name=f"{prefix}{name}",
        description=item.description or item.title or "",
        function=call,
        parameters=dict(item.input_schema),
        timeout=timeout,
        is_async=True,
    )


def result_content(result: mcp_types.CallToolResult) -> str | tuple[ContentPart, ...]:
    """A tool result's content: text alone as a string, else content parts in order
    (images, and PDF or text files, as the providers send them). Structured content
    with no content blocks is sent as its JSON."""
    if not result.content and result.structured_content is not None:
        return json.dumps(result.structured_content)
    parts = [_part(block) for block in result.content]
    if all(part.type == "text" for part in parts):
        return "\n".join(part.content for part in parts)
    return tuple(parts)


def _part(block: Any) -> ContentPart:
    if isinstance(block, mcp_types.TextContent):
        return ContentPart.text(block.text)
    if isinstance(block, mcp_types.ImageContent):
        return ContentPart(
            type="image", content=block.data, options={"media_type": block.mime_type}
        )
    if isinstance(block, mcp_types.EmbeddedResource):
        return _resource(block.resource)
    if isinstance(block, mcp_types.ResourceLink):
        about = f": {block.description}" if block.description else ""
        return ContentPart.text(f"[resource {block.name} at {block.uri}{about}]")
    if isinstance(block, mcp_types.AudioContent):
        return ContentPart.text(f"[audio ({block.mime_type}) the model cannot be sent]")
    return ContentPart.text(f"[a {getattr(block, 'type', 'content')} block]")


def _resource(resource: Any) -> ContentPart:
    """An embedded resource: its text, or its data as an image or a file."""
    if isinstance(resource, mcp_types.TextResourceContents):
        return ContentPart.text(resource.text)
    media_type = resource.mime_type or "application/octet-stream"
    if media_type.startswith("image/"):
        return ContentPart(type="image", content=resource.blob, options={"media_type": media_type})
    filename = str(resource.uri).rstrip("/").rsplit("/", 1)[-1] or "resource"
    return ContentPart(
        type="file",
        content=resource.blob,
        options={"media_type": media_type, "filename": filename},
    )
