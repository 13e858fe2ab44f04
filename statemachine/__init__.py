"""agentfsm: an LLM agent's tool-calling loop as an explicit, inspectable state machine.

The agent (``Agent``, ``AgentRun``, ``AgentState``), the middleware
(``HumanInTheLoop``, ``Middleware``) and the child runs (``SubAgent``,
``run_machine``) are imported when first named, so a chain run by its modes does
not pay for them.
"""

from typing import TYPE_CHECKING, Any

from . import modes as _modes  # noqa: F401  (registers the built-in modes by name)
from .approval import ActionRequest, Approval, Decision, DecisionError
from .chain import LLMChain
from .effects import effects
from .errors import AgentfsmError, ChainError, IllegalTransitionError
from .hooks import RunHook
from .machine import Edge, MachineTable
from .messages import (
    ContentPart,
    Message,
    MessageDelta,
    MessageExpansion,
    Thinking,
    ToolCall,
    ToolResult,
    Usage,
)
from .modes.standard import STANDARD
from .options import Options, StandardOptions
from .results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult, Terminal
from .run import Run
from .steps import Step
from .tools import Tool, ToolContext, ToolOutput, tool
from .trace import Trace, Transition

__all__ = [
    "STANDARD",
    "ActionRequest",
    "Agent",
    "AgentfsmError",
    "AgentRun",
    "AgentState",
    "Approval",
    "ChainError",
    "ContentPart",
    "Continue",
    "Decision",
    "DecisionError",
    "Edge",
    "Failed",
    "HumanInTheLoop",
    "IllegalTransitionError",
    "Interrupted",
    "LLMChain",
    "MachineTable",
    "Message",
    "MessageDelta",
    "MessageExpansion",
    "Middleware",
    "Ok",
    "Options",
    "Paused",
    "PipelineResult",
    "Run",
    "RunHook",
    "StandardOptions",
    "Step",
    "SubAgent",
    "Terminal",
    "Thinking",
    "Tool",
    "tool",
    "ToolCall",
    "ToolContext",
    "ToolOutput",
    "ToolResult",
    "Trace",
    "Transition",
    "Usage",
    "effects",
    "run_machine",
]

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ._state import AgentState
    from .agent import Agent, AgentRun
    from .middleware import HumanInTheLoop, Middleware
    from .subagents import SubAgent, run_machine


def __getattr__(name: str) -> Any:
    """The agent's and the middleware's names, imported when first asked for."""
    if name in ("Agent", "AgentRun"):
        from . import agent

        value = getattr(agent, name)
    elif name == "AgentState":
        from ._state import AgentState as value
    elif name in ("HumanInTheLoop", "Middleware"):
        from . import middleware

        value = getattr(middleware, name)
    elif name in ("SubAgent", "run_machine"):
        from . import subagents

        value = getattr(subagents, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # asked once
    return value
