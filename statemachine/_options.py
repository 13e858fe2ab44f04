"""A run's options, one typed value checked once, and the checks of what a user passes in.

Every table's runs take an :class:`Options` (or a subclass the table names:
:class:`StandardOptions` for the standard machine, :class:`LangChainOptions`
for the LangChain modes). A run checks its options once, when it starts; its
steps read them as attributes (``opts.max_runs``), each option with one default,
the class's. An :class:`Options` is also a read-only mapping of its options, so
a step written for a plain dict (``opts.get("drafts", 2)``) reads a user
machine's own options, kept in :attr:`Options.extra`.

Each check returns the value (normalized) or raises ``TypeError`` (wrong kind)
or ``ValueError`` (right kind, wrong value) naming the option, so a typo fails
at ``Agent(...)`` or ``agent.start(...)`` and not as a failed run later.
"""

from __future__ import annotations

import collections.abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

import attrs

from ._chain import CALLBACK_NAMES, Callbacks
from ._tools import Tool

if TYPE_CHECKING:
    from agentfsm._chat_model import ChatModel

__all__ = [
    "LangChainOptions",
    "Options",
    "StandardOptions",
    "options_of",
    "check_callbacks",
    "check_max_runs",
    "check_model",
    "check_optional",
    "check_sequence",
    "check_tools",
]

_T = TypeVar("_T")


def _kind(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})" if len(repr(value)) <= 60 else type(value).__name__


def check_model(model: Any) -> ChatModel:
    """A chat model: an object with ``async complete(messages, tools, on_delta=...)`` and a name."""
    if not callable(getattr(model, "complete", None)) or not isinstance(
        getattr(model, "name", None), str
    ):
        raise TypeError(
            f"model must be a ChatModel (an object with a name and an async "
            f"complete(messages, tools, on_delta=...)), got {_kind(model)}; "
            "see agentfsm.providers"
        )
    return model  # type: ignore[no-any-return]


def check_sequence(option: str, value: Any) -> tuple[Any, ...]:
    """A list or tuple of items (a single item or a string is a mistake)."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence | tuple):
        raise TypeError(f"{option} must be a list, got {_kind(value)}")
    return tuple(value)


def check_tools(tools: Any) -> tuple[Tool, ...]:
    """Tools made with ``@tool``, each name once."""
    if isinstance(tools, Tool):
        raise TypeError(f"tools must be a list of tools, got the single tool {tools.name!r}")
    out = check_sequence("tools", tools)
    for index, item in enumerate(out):
        if not isinstance(item, Tool):
            hint = "; decorate it with @tool" if callable(item) else ""
            raise TypeError(f"tools[{index}] must be a Tool, got {_kind(item)}{hint}")
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise ValueError(f"Tool names must be unique, got: {names}")
    return out


def check_callbacks(callbacks: Any) -> tuple[Callbacks, ...]:
    """Mappings of known callback names to callables."""
    out = check_sequence("callbacks", callbacks)
    for index, handlers in enumerate(out):
        if not isinstance(handlers, Mapping):
            raise TypeError(
                f"callbacks[{index}] must be a mapping of callback names to functions, "
                f"got {_kind(handlers)}"
            )
        unknown = sorted(set(handlers) - CALLBACK_NAMES)
        if unknown:
            raise ValueError(
                f"callbacks[{index}]: unknown callback name(s) {unknown}. "
                f"Known: {sorted(CALLBACK_NAMES)}"
            )
        for name, handler in handlers.items():
            if not callable(handler):
                raise TypeError(
                    f"callbacks[{index}][{name!r}] must be callable, got {_kind(handler)}"
                )
    return out


def check_max_runs(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_runs must be a positive integer, got: {value!r}")
    return value


def check_token_budget(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"token_budget must be a positive integer or None, got: {value!r}")
    return value


def check_tool_names(value: Any) -> tuple[str, ...] | None:
    """One tool name or a list of them; None or an empty list turns the contract off."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(value) or None
    raise ValueError(f"Invalid until_tool option: expected string or list, got: {value!r}")


def collapse_until_tool(
    until_tool: str | Sequence[str] | None, until_tool_success: str | Sequence[str] | None
) -> tuple[str | Sequence[str] | None, bool]:
    """The mode's ``(until_tool, require_tool_success)`` from execute's two options."""
    if until_tool_success is not None:
        return until_tool_success, True
    if until_tool is not None:
        return until_tool, False
    return None, False


def until_targets(
    until_tool: Any, until_tool_success: Any, tools: Sequence[str] | None = None
) -> tuple[tuple[str, ...], bool]:
    """The until-tool contract from :meth:`Agent.start <agentfsm.Agent.start>`'s two
    spellings, checked: the target names (empty: none) and whether only a successful
    result counts. The one place the spellings meet, so every entry refuses alike.

    At most one of the two is given, each a name or a list; with ``tools`` (the
    agent's tool names) every target is one of them.
    """
    if until_tool is not None and until_tool_success is not None:
        raise ValueError(
            "Cannot pass both until_tool and until_tool_success; they are mutually exclusive"
        )
    target, success = collapse_until_tool(until_tool, until_tool_success)
    names = check_tool_names(target) or ()
    if tools is not None:
        missing = [n for n in names if n not in tools]
        if missing:
            key = "until_tool_success" if success else "until_tool"
            raise ValueError(f"{key}: tool(s) {missing} not found. Available: {list(tools)}")
    return names, success


def check_optional(option: str, value: _T, kind: Any) -> _T:
    """``value`` is None or of ``kind`` (``Callable`` checks callability)."""
    if value is None:
        return value
    if kind is collections.abc.Callable:
        if not callable(value):
            raise TypeError(f"{option} must be callable (or None), got {_kind(value)}")
    elif not isinstance(value, kind):
        raise TypeError(f"{option} must be {kind.__name__} (or None), got {_kind(value)}")
    return value


# ---------------------------------------------------------------- typed options


def _callable_or_none(option: str) -> Callable[[Any, Any, Any], None]:
    def check(_: Any, __: Any, value: Any) -> None:
        check_optional(option, value, collections.abc.Callable)

    return check


def _max_runs(_: Any, __: Any, value: Any) -> None:
    check_max_runs(value)


def _token_budget(_: Any, __: Any, value: Any) -> None:
    check_token_budget(value)


def _middleware(value: Any) -> tuple[Any, ...]:
    # A function of ours, not ``tuple``: attrs reads a converter's signature, and a
    # builtin's is parsed from text by ``inspect`` (its tokenizer's regex, at import).
    return tuple(value)


#: What options hold where they hold nothing: one read-only mapping, shared by every
#: run's options (most runs have no extra steps and no options of their machine's own).
_NOTHING: Final[Mapping[str, Any]] = MappingProxyType({})


def _extra_steps(value: Any) -> Mapping[str, tuple[Any, ...]]:
    if not isinstance(value, Mapping):
        raise TypeError(
            f"extra_steps must be a mapping of state names to steps, got {_kind(value)}"
        )
    if not value:
        return _NOTHING
    return {state: tuple(steps) for state, steps in value.items()}


_DEFAULT_MAX_RUNS: Final = 25


@attrs.frozen(kw_only=True)
class Options(Mapping[str, Any]):
    """The options every built-in step reads, checked once when a run starts.

    ``max_runs`` bounds the model calls of one run (25, the LangChain modes'
    default; the standard machine's is 50); ``should_pause()`` true pauses after
    a reply; ``tool_names`` is the until-tool contract (``require_tool_success``:
    only a successful result counts); ``middleware`` is the agent's stack (the
    approval gate asks it); ``token_budget`` bounds a run's tokens;
    ``extra_steps`` (``{"calling": [my_check]}``) run after a state's own steps.
    Options a class does not declare are kept in ``extra`` when the class is
    :attr:`open`, refused otherwise.
    """

    max_runs: int = attrs.field(default=_DEFAULT_MAX_RUNS, validator=_max_runs)
    should_pause: Callable[[], bool | str] | None = attrs.field(
        default=None, validator=_callable_or_none("should_pause")
    )
    tool_names: tuple[str, ...] | None = attrs.field(default=None, converter=check_tool_names)
    require_tool_success: bool = False
    middleware: tuple[Any, ...] = attrs.field(default=(), converter=_middleware)
    token_budget: int | None = attrs.field(default=None, validator=_token_budget)
    extra_steps: Mapping[str, tuple[Any, ...]] = attrs.field(
        default=_NOTHING, converter=_extra_steps
    )
    #: A machine's own options, by name (``{"drafts": 3}``), for an open class.
    extra: Mapping[str, Any] = attrs.field(default=_NOTHING)

    #: Whether options the class does not declare go into ``extra`` (else: ValueError).
    open: ClassVar[bool] = True
    #: Other names an option is passed under (``{"until_tool": "tool_names"}``).
    aliases: ClassVar[Mapping[str, str]] = {"should_pause?": "should_pause"}

    @classmethod
    def of(cls, value: Mapping[str, Any] | None = None, /, **changes: Any) -> Options:
        """``value`` (a mapping, or options) with ``changes``, as this class, checked.

        Options of this class without changes are returned as they are: a run
        given its table's options checks nothing twice.
        """
        if not changes and cls in type(value).__mro__:  # isinstance, without an ABC's check
            return value  # type: ignore[return-value]
        given = {**(value or {}), **changes}
        for alias, name in cls.aliases.items():
            if alias in given:
                given.setdefault(name, given.pop(alias))
        declared = cls.declared()
        extra = dict(given.pop("extra", None) or {})
        unknown = [n for n in given if n not in declared]
        for name in unknown:
            extra[name] = given.pop(name)
        if unknown or (extra and not cls.open):
            _refuse_typos(cls, unknown if cls.open else sorted(extra), declared)
        return cls(**given, extra=extra or _NOTHING)

    @classmethod
    def declared(cls) -> frozenset[str]:
        """The names of the options this class declares (``extra`` aside)."""
        return _declared(cls)

    # A read-only mapping of the options: a step written for a dict reads them too.

    def __getitem__(self, key: str) -> Any:
        if key != "extra" and key in self.declared():
            return getattr(self, key)
        return self.extra[key]

    def __iter__(self) -> Iterator[str]:
        yield from (f.name for f in attrs.fields(type(self)) if f.name != "extra")
        yield from self.extra

    def __len__(self) -> int:
        return len(self.declared()) + len(self.extra)


def _refuse_typos(cls: type[Options], names: Sequence[str], declared: frozenset[str]) -> None:
    """Refuse an option a closed class does not declare, and, even on an open class, one
    named a letter or two off a declared option (``max_run``): a typo, not an option of
    the machine's own."""
    import difflib  # here: only a run given an unknown option reads it

    known = sorted(declared | set(cls.aliases) - {"should_pause?"})
    hints = {n: difflib.get_close_matches(n, known, n=1, cutoff=0.85) for n in names}
    if cls.open:
        names = [n for n in names if hints[n]]
    if names:
        said = "; ".join(f"did you mean {hints[n][0]!r} for {n!r}?" for n in names if hints[n])
        raise ValueError(
            f"Unknown option(s) {sorted(names)}. Options: {known}" + (f" ({said})" if said else "")
        )


_DECLARED: dict[type[Options], frozenset[str]] = {}


def _declared(cls: type[Options]) -> frozenset[str]:
    names = _DECLARED.get(cls)
    if names is None:
        names = _DECLARED[cls] = frozenset(f.name for f in attrs.fields(cls)) - {"extra"}
    return names


@attrs.frozen(kw_only=True)
class StandardOptions(Options):
    """The standard machine's options: ``max_runs`` 50, ``until_tool`` (a name or a
    list; empty is off) and ``require_tool_success``; any other name is refused."""

    max_runs: int = attrs.field(default=50, validator=_max_runs)

    open: ClassVar[bool] = False
    aliases: ClassVar[Mapping[str, str]] = {
        "should_pause?": "should_pause",
        "until_tool": "tool_names",
    }

    @property
    def until_tool(self) -> tuple[str, ...]:
        """The target tools, as :meth:`Agent.start <agentfsm.Agent.start>` names them."""
        return self.tool_names or ()

    def saved(self) -> dict[str, Any]:
        """What a checkpoint keeps of them: the options a resume must run with again."""
        return {
            "until_tool": list(self.until_tool),
            "require_tool_success": self.require_tool_success,
            "max_runs": self.max_runs,
        }


@attrs.frozen(kw_only=True)
class LangChainOptions(Options):
    """The LangChain modes' options: ``should_continue(chain)`` asks the ``step``
    mode for another step; ``force_recurse`` makes ``until_success`` call the model
    even when the last message already stands."""

    should_continue: Callable[[Any], bool] | None = attrs.field(
        default=None, validator=_callable_or_none("should_continue")
    )
    force_recurse: bool = False


_DEFAULTS: Final = Options()


def options_of(opts: Mapping[str, Any] | None) -> Options:
    """The options a step reads: a run's own, or a plain mapping given to a step alone
    (converted by :meth:`Options.of`, the one place a mapping becomes options)."""
    if Options in type(opts).__mro__:  # a run's own: every check of every step asks
        return opts  # type: ignore[return-value]
    return _DEFAULTS if opts is None else Options.of(opts)
