"""agentfsm: an LLM agent's tool-calling loop as an explicit, inspectable state machine.

This is the face: everything a program names is exported here or by one of the
faces beside it (``agentfsm.steps``, ``agentfsm.providers``, ``agentfsm.store``,
``agentfsm.diagrams``, ``agentfsm.versions``, ``agentfsm.testing``,
``agentfsm.durable``; the extras ``agentfsm.mcp``, ``agentfsm.otel``,
``agentfsm.studio``). The modules behind them (``_name``) are private rooms that
move freely between releases.

The agent (``Agent``, ``AgentRun``, ``AgentState``), the middleware and the child
runs are imported when first named, so a chain run by its modes does not pay for them.
"""

import importlib
from typing import TYPE_CHECKING, Any

from . import _modes as _modes  # registers the built-in modes by name
from . import _moved
from ._approval import ActionRequest, Approval, Decision, DecisionError, Decisions
from ._chain import LLMChain
from ._effects import effects
from ._errors import (
    AgentfsmError,
    ChainError,
    DecisionConflictError,
    DurableError,
    FormatError,
    IllegalTransitionError,
    InvariantError,
    MachineChangedError,
    MachineDefinitionError,
    MachineError,
    OtherMachineError,
    ProviderError,
    ResumeError,
    RunExistsError,
    RunFinishedError,
    RunInUseError,
    RunNotFoundError,
    StoreError,
    UnknownMachineError,
    UnknownToolError,
)
from ._hooks import RunHook
from ._machine import Edge, MachineTable
from ._messages import (
    ContentPart,
    Message,
    MessageDelta,
    MessageExpansion,
    Thinking,
    ToolCall,
    ToolResult,
    Usage,
)
from ._modes.langchain import (
    SINGLE_CALL,
    STEP,
    UNTIL_SUCCESS,
    UNTIL_TOOL_USED,
    WHILE_NEEDS_RESPONSE,
)
from ._modes.standard import STANDARD
from ._options import LangChainOptions, Options, StandardOptions
from ._output import OutputError
from ._results import Failed, Interrupted, Ok, Paused
from ._run import Run
from ._tools import Tool, ToolContext, ToolOutput, tool
from ._trace import Trace, Transition

__all__ = [
    "SINGLE_CALL",
    "STANDARD",
    "STEP",
    "UNTIL_SUCCESS",
    "UNTIL_TOOL_USED",
    "WHILE_NEEDS_RESPONSE",
    "ActionRequest",
    "Agent",
    "AgentRun",
    "AgentState",
    "AgentfsmError",
    "Approval",
    "ChainError",
    "ContentPart",
    "Decision",
    "DecisionConflictError",
    "DecisionError",
    "DurableError",
    "Decisions",
    "Edge",
    "Failed",
    "FormatError",
    "HumanInTheLoop",
    "IllegalTransitionError",
    "Interrupted",
    "InvariantError",
    "LLMChain",
    "LangChainOptions",
    "MachineChangedError",
    "MachineDefinitionError",
    "MachineError",
    "MachineTable",
    "Message",
    "MessageDelta",
    "MessageExpansion",
    "Middleware",
    "Ok",
    "Options",
    "OtherMachineError",
    "OutputError",
    "Paused",
    "ProviderError",
    "ResumeError",
    "Run",
    "RunExistsError",
    "RunFinishedError",
    "RunHook",
    "RunInUseError",
    "RunNotFoundError",
    "StandardOptions",
    "StoreError",
    "SubAgent",
    "Thinking",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolOutput",
    "ToolResult",
    "Trace",
    "Transition",
    "UnknownMachineError",
    "UnknownToolError",
    "Usage",
    "effects",
    "off_loop",
    "restore_run",
    "run_machine",
    "start_run",
    "tool",
]

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ._agent import Agent, AgentRun
    from ._callbacks import off_loop
    from ._middleware import HumanInTheLoop, Middleware
    from ._resume import restore_run, start_run
    from ._state import AgentState
    from ._subagents import SubAgent, run_machine

#: Names imported when first asked for, and the private module that holds each.
_LAZY = {
    "Agent": "._agent",
    "AgentRun": "._agent",
    "AgentState": "._state",
    "HumanInTheLoop": "._middleware",
    "Middleware": "._middleware",
    "SubAgent": "._subagents",
    "off_loop": "._callbacks",
    "run_machine": "._subagents",
    "restore_run": "._resume",
    "start_run": "._resume",
}
#: The last release's names this face no longer exports, kept one more release.
_OLD = frozenset({"Continue", "PipelineResult", "Step", "Terminal"})
_old = _moved.forward(__name__, ("agentfsm.steps", "agentfsm._results"), _OLD)


def __getattr__(name: str) -> Any:
    """The agent's and the middleware's names, imported when first asked for."""
    if name not in _LAZY:
        return _old(name)
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    _moved.show(__name__, value, globals())
    globals()[name] = value  # asked once
    return value


_moved.show_at(__name__, {**globals(), "__all__": [n for n in __all__ if n not in _LAZY]})
_moved.install()
_moved.keep_names(__name__)
