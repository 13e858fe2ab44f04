"""agentfsm: an LLM agent's tool-calling loop as an explicit, inspectable state machine."""

from . import modes as _modes  # noqa: F401  (registers the built-in modes by name)
from ._state import AgentState
from .agent import Agent, AgentRun
from .chain import LLMChain
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
from .middleware import HumanInTheLoop, Middleware
from .modes.standard import STANDARD
from .options import Options, StandardOptions
from .results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult, Terminal
from .run import Run
from .steps import Step
from .tools import Tool, ToolContext, ToolOutput, tool
from .trace import Trace, Transition

__all__ = [
    "STANDARD",
    "Agent",
    "AgentfsmError",
    "AgentRun",
    "AgentState",
    "ChainError",
    "ContentPart",
    "Continue",
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
]

__version__ = "0.1.0"
