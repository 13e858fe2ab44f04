"""Chat models for agentfsm: the protocol, a scripted model, fallbacks, real providers."""

from ._transport import Limits, RetryPolicy
from .anthropic import AnthropicChat
from .base import ChatModel, DeltaHandler, ModelSettings, Usage, provider_of
from .fallback import FallbackModel
from .openai import OpenAIChat
from .openai_responses import OpenAIResponses
from .registry import PROVIDERS, create_model
from .scripted import ScriptedModel, ScriptedRequest, call_tool, call_tools, fail, say
from .wrapper import WrapperModel

__all__ = [
    "PROVIDERS",
    "AnthropicChat",
    "ChatModel",
    "DeltaHandler",
    "FallbackModel",
    "Limits",
    "ModelSettings",
    "OpenAIChat",
    "OpenAIResponses",
    "RetryPolicy",
    "ScriptedModel",
    "ScriptedRequest",
    "Usage",
    "WrapperModel",
    "call_tool",
    "call_tools",
    "create_model",
    "fail",
    "provider_of",
    "say",
]
