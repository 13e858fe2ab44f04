"""LangGraph: the agent graph of ``langchain.agents.create_agent`` over a fake chat model.

``create_agent`` is the current way to build LangGraph's agent loop (it
replaces ``langgraph.prebuilt.create_react_agent``, deprecated since 1.0, and
runs about a quarter faster).  The graph is compiled once, without a
checkpointer; each run is ``await graph.ainvoke(...)``.  The fake model is a
``BaseChatModel`` subclass whose ``bind_tools`` binds the tool schemas the way
provider integrations do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from importlib.metadata import version as _dist_version
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool

import workload as w

NAME = "langgraph"


def version() -> str:
    return f"langgraph {_dist_version('langgraph')}, langchain {_dist_version('langchain')}"


class FakeToolModel(BaseChatModel):
    """Asks for ``add`` while the run wants tools, then answers."""

    @property
    def _llm_type(self) -> str:
        return "peers-fake"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("the benchmark only runs the async path")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        n, wants_tool = await w.model_turn()
        if n >= 2:
            last = messages[-1]
            w.check_last_result(n, last.content if isinstance(last, ToolMessage) else None)
        if wants_tool:
            message = AIMessage(
                content="",
                tool_calls=[{"name": w.TOOL_NAME, "args": {"a": n, "b": 1}, "id": f"call_{n}"}],
            )
        else:
            message = AIMessage(content=w.final_text())
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return await w.tool_add(a, b)


GRAPH = create_agent(FakeToolModel(), [add])


async def _run(ctx: w.RunCtx) -> str:
    # Each round is two super-steps (model node, tools node); leave headroom.
    config: RunnableConfig = {"recursion_limit": 2 * ctx.k + 10}
    state = await GRAPH.ainvoke({"messages": [("user", w.PROMPT)]}, config=config)
    return str(state["messages"][-1].content)


async def run_once(k: int) -> None:
    await w.drive(_run, k)


async def idle_run(event: asyncio.Event) -> None:
    await w.drive(_run, w.IDLE_K, gate=event)
