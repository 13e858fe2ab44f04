"""agentfsm: an LLM agent's tool-calling loop as an explicit, inspectable state machine."""

from .chain import LLMChain
from .errors import ChainError, IllegalTransitionError
from .messages import (
    ContentPart,
    Message,
    MessageDelta,
    MessageExpansion,
    ToolCall,
    ToolResult,
)
from .results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult, Terminal
from .tools import Tool, ToolContext, ToolOutput, tool

__all__ = [
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
