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
from agentfsm import AgentfsmError, errors

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
    tree = (errors.__doc__ or "").split("::\n\n", 1)[1].split("\n\n", 1)[0]
    drawn: dict[str, str | None] = {}
    for line in tree.splitlines():
        match = _TREE_LINE.match(line)
        if match and match[1][0].isupper():  # groups and wrapped lines start in lower case
            drawn[match[1]] = match[2]
    return drawn


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
        standard = [b for b in EXCEPTIONS[name].__mro__ if vars(builtins).get(b.__name__) is b]
        said = standard[0].__name__ if standard[0] is not Exception else None
        assert base == said, f"{name}: the tree says {base}, the class has {said}"


def test_the_old_homes_still_export_them() -> None:
    from agentfsm.errors import InvariantError
    from agentfsm.providers._sse import SSELimitError
    from agentfsm.serialization import FormatError, UnknownToolError
    from agentfsm.store import (
        ResumeError,
        RunExistsError,
        RunInUseError,
        RunNotFoundError,
        StoreError,
    )

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
    from agentfsm.serialization import loads

    with pytest.raises(AgentfsmError, match="agentfsm"):
        loads('{"format": "other/1"}', agentfsm.Message)
    with pytest.raises(ValueError, match="agentfsm"):
        loads('{"format": "other/1"}', agentfsm.Message)
