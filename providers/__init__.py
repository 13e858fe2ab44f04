"""Chat models for agentfsm: the protocol, a scripted model, fallbacks, real providers."""

from .base import ChatModel, DeltaHandler, ModelSettings, Usage
from .fallback import FallbackModel
from .scripted import ScriptedModel, ScriptedRequest, call_tool, call_tools, fail, say

__all__ = [
    "ChatModel",
    "DeltaHandler",
    "FallbackModel",
    "ModelSettings",
    "ScriptedModel",
    "ScriptedRequest",
    "Usage",
    "call_tool",
    "call_tools",
    "fail",
    "say",
]
