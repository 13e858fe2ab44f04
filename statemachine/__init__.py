"""agentfsm: an LLM agent's tool-calling loop as an explicit, inspectable state machine."""

from . import modes as _modes  # noqa: F401  (registers the built-in modes by name)
from .agent import Agent, AgentRun
from .chain import LLMChain
from .errors import AgentfsmError, ChainError, IllegalTransitionError
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
from .middleware import HumanInTheLoop, Middleware
from .modes.standard import STANDARD
from .results import Failed, Interrupted, Ok, Paused, Terminal
from .run import Run
from .state import AgentState
from .tools import Tool, ToolContext, ToolOutput, tool
from .trace import Trace, Transition

__all__ = [
    "STANDARD",
    "Agent",
    "AgentfsmError",
    "AgentRun",
    "AgentState",
    "Edge",
    "HumanInTheLoop",
    "MachineTable",
    "Middleware",
    "Run",
    "Trace",
    "Transition",
    "ChainError",
    "ContentPart",
    "Failed",
    "IllegalTransitionError",
    "Interrupted",
    "LLMChain",
    "Message",
    "MessageDelta",
    "MessageExpansion",
    "Ok",
    "Paused",
    "Terminal",
    "Thinking",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolOutput",
    "ToolResult",
    "Usage",
    "tool",
]

__version__ = "0.1.0"
