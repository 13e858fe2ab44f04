"""The agent named by ``MODULE:ATTR``, as ``runs resume --agent``, the worker and the
studio take it: one loader, so each refuses a bad name in the same words."""

from __future__ import annotations

from typing import Final

from ._agent import Agent
from ._errors import AgentfsmError
from ._spec import import_attribute

__all__ = ["DEFAULT_AGENT", "UsageError", "load_agent"]

#: The agent a saved run is resumed with when none is named.
DEFAULT_AGENT: Final = "agentfsm._demo:demo_agent"


class UsageError(AgentfsmError):
    """A mistake on the command line: said on stderr, exit status 2."""


def load_agent(spec: str, *, from_cwd: bool = True) -> Agent:
    """The agent named by ``module:attribute``: an Agent, or a function returning one.

    With ``from_cwd`` a module in the current folder is importable: the folder goes
    on ``sys.path`` after the installed packages (never in front of them)."""
    value = import_attribute(spec, "--agent", UsageError, from_cwd=from_cwd)
    if not isinstance(value, Agent) and callable(value):
        try:
            value = value()
        except Exception as exc:
            called = spec.partition(":")[2]
            raise UsageError(
                f"--agent {spec}: calling {called}() failed: {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(value, Agent):
        raise UsageError(f"--agent {spec} is a {type(value).__name__}, not an Agent")
    return value
