"""agentfsm: an LLM agent's tool-calling loop as an explicit, inspectable state machine."""

from .agent import Agent, AgentRun, AgentState, collapse_until_tool
from .chain import LLMChain
from .errors import ChainError, IllegalTransitionError
from .machine import STANDARD, Edge, MachineTable
from .messages import (
    ContentPart,
    Message,
    MessageDelta,
    MessageExpansion,
    ToolCall,
    ToolResult,
)
from .middleware import HumanInTheLoop, Middleware
from .modes import run_chain
from .modes.standard import StandardMode
from .results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult, Terminal
from .run import Run
from .tools import Tool, ToolContext, ToolOutput, tool
from .trace import Trace, Transition

__all__ = [
    "STANDARD",
    "Agent",
    "AgentRun",
    "AgentState",
    "Edge",
    "HumanInTheLoop",
    "MachineTable",
    "Middleware",
    "Run",
    "StandardMode",
    "Trace",
    "Transition",
    "collapse_until_tool",
    "run_chain",
    "ChainError",
    "ContentPart",
    "Continue",
    "Failed",
    "IllegalTransitionError",
    "Interrupted",
    "LLMChain",
    "Message",
    "MessageDelta",
    "MessageExpansion",
    "Ok",
    "Paused",
    "PipelineResult",
    "Terminal",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolOutput",
    "ToolResult",
    "tool",
]

__version__ = "0.1.0"
