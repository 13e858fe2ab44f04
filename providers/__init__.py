"""Chat models for agentfsm: the protocol, a scripted model, fallbacks, real providers.

The face of the package; the modules behind it (``_openai``, ``_responses``,
``_anthropic``, ``_scripted``, ``_fallback``, ``_transport``, ``_sse``) are private.
A provider's failure is an :class:`agentfsm.ProviderError` whose ``type`` says
whether another attempt, or another model, may succeed.
"""

from agentfsm._moved import forward, show_at

from .._chat_model import ChatModel, DeltaHandler, ModelSettings, provider_of
from ._anthropic import AnthropicChat
from ._fallback import FallbackModel
from ._openai import OpenAIChat
from ._registry import create_model
from ._responses import OpenAIResponses
from ._rules import MODEL_RULES, ModelRule, ModelRules, rules_for
from ._scripted import ScriptedModel, call_tool, call_tools, fail, say
from ._transport import Limits, RetryPolicy
from ._wrapper import WrapperModel

__all__ = [
    "MODEL_RULES",
    "AnthropicChat",
    "ChatModel",
    "DeltaHandler",
    "FallbackModel",
    "Limits",
    "ModelRule",
    "ModelRules",
    "ModelSettings",
    "OpenAIChat",
    "OpenAIResponses",
    "RetryPolicy",
    "ScriptedModel",
    "WrapperModel",
    "call_tool",
    "call_tools",
    "create_model",
    "fail",
    "provider_of",
    "rules_for",
    "say",
]

#: The last release's names this face no longer exports, kept one more release.
__getattr__ = forward(
    __name__,
    ("agentfsm", "agentfsm.providers._registry", "agentfsm.providers._scripted"),
    frozenset({"PROVIDERS", "ScriptedRequest", "Usage"}),
)
show_at(__name__, globals())
