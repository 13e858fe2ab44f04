"""One base for every exception: ``except AgentfsmError`` catches whatever agentfsm raises."""

from __future__ import annotations

import builtins
import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import agentfsm
import agentfsm.providers
from agentfsm import AgentfsmError
from agentfsm import _errors as errors

#: The name at the head of a line of the docstring's tree, and the standard base after it.
_TREE_LINE = re.compile(r"[\s│├└─]*(\w+)(?:\s+\((\w+)\))?")


def _modules() -> list[ModuleType]:
    """Every module of agentfsm and its providers, private ones too."""
    found = []
    for package in (agentfsm, agentfsm.providers):
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            found.append(importlib.import_module(info.name))
    return found


def _exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in agentfsm whose name is not private, by name."""
    found: dict[str, type[BaseException]] = {}
    for module in _modules():
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                assert found.get(name, value) is value, f"two exceptions named {name}"
                found[name] = value
    return found


def _tree() -> dict[str, str | None]:
    """The classes errors.py's docstring draws, each with the standard base it names."""
    return {name: base for name, (base, _) in _drawn().items()}


def _drawn() -> dict[str, tuple[str | None, str | None]]:
    """Each class the tree draws: the standard base it names, and the class it hangs from."""
    tree = (errors.__doc__ or "").split("::\n\n", 1)[1].split("\n\n", 1)[0]
    drawn: dict[str, tuple[str | None, str | None]] = {}
    above: dict[int, str] = {}  # the name drawn last at each depth (groups too)
    for line in tree.splitlines():
        match = _TREE_LINE.match(line)
        if not match:
            continue
        depth = match.start(1)
        if match[1][0].isupper():  # groups and wrapped lines start in lower case
            parents = [name for d, name in sorted(above.items()) if d < depth]
            parent = next((n for n in reversed(parents) if n[0].isupper()), None)
            drawn[match[1]] = (match[2], parent)
        if line.lstrip(" │")[:1] in "├└" or depth == 4:
            above = {d: n for d, n in above.items() if d < depth}
            above[depth] = match[1] if match[1][0].isupper() else "group"
    return drawn


def test_the_tree_hangs_each_class_from_the_class_it_subclasses() -> None:
    """A category drawn above a class is one its ``except`` catches."""
    for name, (_, parent) in _drawn().items():
        if parent is not None:
            assert issubclass(EXCEPTIONS[name], EXCEPTIONS.get(parent, AgentfsmError)), (
                f"{name} is drawn under {parent}"
            )


@pytest.mark.parametrize(
    ("category", "members"),
    [
        (
            "StoreError",
            [
                "RunNotFoundError",
                "RunExistsError",
                "RunInUseError",
                "RunFinishedError",
                "ResumeError",
                "DecisionConflictError",
                "FormatError",
                "UnknownToolError",
            ],
        ),
        (
            "MachineError",
            [
                "MachineDefinitionError",
                "UnknownMachineError",
                "MachineChangedError",
                "OtherMachineError",
            ],
        ),
        ("ChainError", ["ProviderError", "OutputError", "CassetteMismatchError"]),
    ],
)
def test_a_category_catches_its_members(category: str, members: list[str]) -> None:
    for member in members:
        with pytest.raises(getattr(agentfsm, category, None) or EXCEPTIONS[category]):
            raise EXCEPTIONS[member].__new__(EXCEPTIONS[member])


def test_every_public_error_is_exported_by_agentfsm_and_shown_there() -> None:
    public = {n for n, e in EXCEPTIONS.items() if e.__module__.split(".")[1:2] != ["_cli"]}
    exported = {n for n in agentfsm.__all__ if n.endswith("Error")}
    elsewhere = {"CassetteMismatchError"}  # its face: testing
    internal = {"SSELimitError", "UsageError", "Unsupported", "Refused"}
    assert exported == public - elsewhere - internal
    assert all(getattr(agentfsm, n).__module__ == "agentfsm" for n in exported)


def test_a_provider_failure_is_a_provider_error() -> None:
    from agentfsm import Agent, AgentState, ProviderError
    from agentfsm.providers import ScriptedModel, fail

    state = Agent(ScriptedModel([fail("rate_limited", "slow down")])).execute_sync(
        AgentState.of("hi")
    )
    assert state.status == "error"
    assert isinstance(state.error, ProviderError) and state.error.retryable


EXCEPTIONS = _exceptions()


def test_the_walk_finds_the_exceptions_of_every_module() -> None:
    assert {
        "ChainError",
        "MachineDefinitionError",
        "FormatError",
        "StoreError",
        "DurableError",
        "SSELimitError",
        "UsageError",
    } <= set(EXCEPTIONS)


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_every_exception_is_an_agentfsm_error(name: str) -> None:
    assert issubclass(EXCEPTIONS[name], AgentfsmError)


@pytest.mark.parametrize(
    ("name", "standard"),
    [
        ("IllegalTransitionError", RuntimeError),
        ("MachineDefinitionError", ValueError),
        ("UnknownMachineError", LookupError),
        ("FormatError", ValueError),
        ("UnknownToolError", LookupError),
        ("InvariantError", ValueError),
        ("RunNotFoundError", LookupError),
        ("ResumeError", ValueError),
        ("RunExistsError", ValueError),
        ("RunInUseError", RuntimeError),
        ("StoreError", RuntimeError),
        ("DurableError", RuntimeError),
        ("SSELimitError", ValueError),
        ("Unsupported", TypeError),
        ("Refused", KeyError),
    ],
)
def test_each_keeps_its_standard_base(name: str, standard: type[Exception]) -> None:
    """An ``except ValueError`` written before the common base still catches it."""
    assert issubclass(EXCEPTIONS[name], standard)


def test_the_docstring_tree_draws_every_exception_with_its_standard_base() -> None:
    drawn = _tree()
    assert next(iter(drawn)) == "AgentfsmError"
    assert set(drawn) == {"AgentfsmError", *EXCEPTIONS}
    for name, base in drawn.items():
        if name == "AgentfsmError":
            continue
        cls = EXCEPTIONS[name]
        standard = {b.__name__ for b in cls.__mro__ if vars(builtins).get(b.__name__) is b}
        standard -= {"Exception", "BaseException", "object"}
        if base is None:
            assert not standard, (
                f"{name}: the tree names no standard base, the class has {standard}"
            )
        else:
            assert base in standard, f"{name}: the tree says {base}, the class has {standard}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_old_homes_still_export_them() -> None:
    from agentfsm import (
        FormatError,
        InvariantError,
        ResumeError,
        RunExistsError,
        RunInUseError,
        RunNotFoundError,
        StoreError,
        UnknownToolError,
    )
    from agentfsm.providers._sse import SSELimitError

    assert (FormatError, UnknownToolError, InvariantError, SSELimitError) == (
        errors.FormatError,
        errors.UnknownToolError,
        errors.InvariantError,
        errors.SSELimitError,
    )
    assert (ResumeError, RunExistsError, RunInUseError, RunNotFoundError, StoreError) == (
        errors.ResumeError,
        errors.RunExistsError,
        errors.RunInUseError,
        errors.RunNotFoundError,
        errors.StoreError,
    )
    assert "AgentfsmError" in agentfsm.__all__


def test_one_except_catches_what_agentfsm_raises() -> None:
    from agentfsm.store import loads

    with pytest.raises(AgentfsmError, match="agentfsm"):
        loads('{"format": "other/1"}', agentfsm.Message)
    with pytest.raises(ValueError, match="agentfsm"):
        loads('{"format": "other/1"}', agentfsm.Message)
