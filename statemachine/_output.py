"""Typed final output: the value an agent's run ends with, checked against a type.

``Agent(model, tools, output_type=T)`` asks the model for a ``T`` (an attrs class,
a dataclass, a TypedDict, an enum, or a JSON type: ``str``, ``int``, ``float``,
``bool``, ``list[...]``, ``dict[str, ...]``, ``Literal``, ``Optional``). The run offers
the model an :class:`OutputTool` named ``final_result`` whose arguments are the value;
a provider with structured output of its own (OpenAI's ``response_format``, the
Responses API's ``text.format``) sends its schema that way instead and the model
answers with the JSON text. Either way the answer is checked in the
``validating_output`` state of the :data:`~agentfsm.modes.standard.STANDARD_OUTPUT`
machine: a value that fits is structured (by the same strict cattrs converter as tool
arguments) and the run ends ``ok``; one that does not is sent back to the model,
saying what was wrong, at most ``retries`` times; after that the run ends in
``error`` with an :class:`OutputError`.

A schema is an object at its root (providers' tools and structured outputs want
one), so a type that is not an object is asked for under ``result``:
``{"result": <value>}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from ._arguments import Unsupported, schema_for, strip_annotated, structure
from ._errors import ChainError
from ._messages import Message, ToolCall, ToolResult
from ._results import Continue, Failed, Ok, PipelineResult
from ._tools import Tool, ToolContext

__all__ = [
    "FINAL_RESULT",
    "OutputError",
    "OutputTool",
    "answered_by_tool",
    "check_output",
    "output_tool_of",
]

#: The name of the tool a model gives its final answer to.
FINAL_RESULT: Final = "final_result"
#: The key a value that is not an object is asked for under.
_BOX: Final = "result"
#: What marks a message sent back to the model because its answer did not fit.
_CORRECTION: Final = "output_correction"


class OutputError(ChainError):
    """The model's final answer did not fit the output type, ``retries`` times over.

    ``problems`` says what was wrong with the last answer, each naming its path.
    """

    def __init__(self, problems: Sequence[str], attempts: int) -> None:
        self.problems = tuple(problems)
        super().__init__(
            "invalid_output",
            f"The model's final answer did not fit the output type after {attempts} "
            f"attempt(s): " + "; ".join(self.problems),
            retryable=False,
            details={"problems": list(self.problems), "attempts": attempts},
        )


def _unset(**_: Any) -> Any:  # pragma: no cover - OutputTool.invoke answers instead
    raise NotImplementedError


@attrs.frozen
class OutputTool(Tool):
    """The ``final_result`` tool of an output type: its schema is the type's, and a
    call's arguments are checked, not run. Make one with :meth:`of`."""

    output_type: Any = attrs.field(default=None, kw_only=True, eq=False)
    #: Whether the value is asked for under ``result`` (a type that is not an object).
    boxed: bool = attrs.field(default=False, kw_only=True)
    #: How many bad answers are sent back to the model before the run fails.
    retries: int = attrs.field(default=2, kw_only=True)

    @classmethod
    def of(cls, output_type: Any, *, retries: int = 2) -> OutputTool:
        """The tool for ``output_type``; TypeError when no JSON schema describes it."""
        if output_type is None or output_type is type(None):
            raise TypeError("output_type must be a type, not None")
        try:
            schema = schema_for(output_type)
        except Unsupported as exc:
            raise TypeError(f"output_type {output_type!r}: {exc}") from None
        boxed = schema.get("type") != "object"
        if boxed:
            schema = {
                "type": "object",
                "properties": {_BOX: schema},
                "required": [_BOX],
                "additionalProperties": False,
            }
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"output_retries must be a whole number from 0, got {retries!r}")
        return cls(
            name=FINAL_RESULT,
            description="Give the final answer: call this once, with the answer as its arguments.",
            function=_unset,
            parameters=schema,
            output_type=strip_annotated(output_type),
            boxed=boxed,
            retries=retries,
        )

    @property
    def output_format(self) -> dict[str, Any]:
        """The schema as providers' native structured output takes it: ``name``,
        ``schema``, and ``strict`` when the schema is one strict mode accepts."""
        return {"name": FINAL_RESULT, "schema": self.parameters, "strict": _strict(self.parameters)}

    def check(self, arguments: Any) -> tuple[Any, list[str]]:
        """``arguments`` as the output type's value, or the problems with them."""
        value = arguments
        if self.boxed:
            if not isinstance(arguments, Mapping) or _BOX not in arguments:
                return None, [f"the answer must be an object with the value under {_BOX!r}"]
            value = arguments[_BOX]
        value, problems = structure("output", value, self.output_type)
        return value, [p.removeprefix("parameter ") for p in problems]

    def read(self, messages: Sequence[Message]) -> tuple[Any, list[str], bool]:
        """The last reply's answer: ``(value, problems, by_tool)``; ``by_tool`` when it
        was a ``final_result`` call (else it is the reply's text, as JSON)."""
        reply = next((m for m in reversed(messages) if m.role == "assistant"), None)
        if reply is None:
            return None, ["there is no answer"], False
        calls = [c for c in reply.tool_calls if c.name == FINAL_RESULT]
        if calls:
            value, problems = self.check(calls[-1].arguments)
            return value, problems, True
        text = _unfenced(reply.text or "")
        try:
            parsed = json.loads(text)
        except ValueError:
            if self.output_type is str and text:
                return text, [], False
            return None, ["the answer is not JSON"], False
        if not self.boxed or (isinstance(parsed, Mapping) and set(parsed) == {_BOX}):
            value, problems = self.check(parsed)
        else:
            value, problems = self.check({_BOX: parsed})
        return value, problems, False

    async def invoke(self, call: ToolCall, context: ToolContext) -> ToolResult:
        _, problems = self.check(call.arguments)
        if problems:
            return ToolResult(
                tool_call_id=call.call_id,
                name=self.name,
                content=_correction(problems),
                is_error=True,
            )
        return ToolResult(
            tool_call_id=call.call_id, name=self.name, content="Final answer received."
        )


def output_tool_of(tools: Iterable[Tool]) -> OutputTool | None:
    """The output tool among ``tools`` (wrapped or not), if a run has one."""
    for tool in tools:
        while not isinstance(tool, OutputTool) and isinstance(getattr(tool, "wrapped", None), Tool):
            tool = tool.wrapped  # type: ignore[attr-defined]
        if isinstance(tool, OutputTool):
            return tool
    return None


def answered_by_tool(messages: Sequence[Message]) -> bool:
    """Whether the last reply gave its final answer to ``final_result`` (and its results are in)."""
    if not messages or messages[-1].role != "tool":
        return False
    reply = next((m for m in reversed(messages) if m.role == "assistant"), None)
    return reply is not None and any(c.name == FINAL_RESULT for c in reply.tool_calls)


# ---------------------------------------------------------------- the machine's step


def check_output(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
    """The ``validating_output`` state: the final answer fits the output type (``Ok``),
    or goes back to the model with what was wrong (``Continue``), or, past the output
    tool's ``retries``, fails the run with an :class:`OutputError`.

    A run without an output tool has nothing to check: ``Ok``.
    """
    if not isinstance(result, Continue):
        return result
    chain = result.chain
    tool = output_tool_of(chain.tools)
    if tool is None:
        return Ok(chain)
    _, problems, by_tool = tool.read(chain.messages)
    if not problems:
        return Ok(chain)
    # A final_result call's error result already told the model; a text answer is told now.
    attempts = _earlier_corrections(chain.messages) + (0 if by_tool else 1)
    if attempts > tool.retries:
        return Failed(chain, OutputError(problems, attempts))
    if by_tool:
        return Continue(chain)
    told = Message(role="user", content=_correction(problems), metadata={_CORRECTION: True})
    return Continue(chain.add_messages([told]))


def _earlier_corrections(messages: Sequence[Message]) -> int:
    """The bad answers sent back since the host's last message."""
    count = 0
    for message in reversed(messages):
        if message.role == "user":
            if not message.metadata.get(_CORRECTION):
                break
            count += 1
        elif message.role == "tool":
            count += sum(r.is_error and r.name == FINAL_RESULT for r in message.tool_results)
    return count


def _correction(problems: Sequence[str]) -> str:
    return (
        "Your final answer does not fit the required output: "
        + "; ".join(problems)
        + ". Give the final answer again, corrected."
    )


def _unfenced(text: str) -> str:
    """``text`` without the Markdown code fence a model may wrap JSON in."""
    text = text.strip()
    if text.startswith("```") and text.endswith("```"):
        text = text[3:-3]
        first, _, rest = text.partition("\n")
        text = rest if first.strip().isalpha() or not first.strip() else text
    return text.strip()


def _strict(schema: Mapping[str, Any]) -> bool:
    """Whether OpenAI's strict mode takes ``schema``: every object closed, with every
    property required."""
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False:
            return False
        if set(schema.get("required") or ()) != set(properties):
            return False
        return all(_strict(s) for s in properties.values())
    for key in ("items", "anyOf", "oneOf"):
        nested = schema.get(key)
        if isinstance(nested, Mapping) and not _strict(nested):
            return False
        if isinstance(nested, list) and not all(_strict(s) for s in nested):
            return False
    return "$ref" not in schema
