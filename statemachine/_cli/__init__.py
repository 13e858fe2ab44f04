"""The ``agentfsm`` command: one module per group of subcommands, ``main`` the entry point."""

from ._main import main, run_command

__all__ = ["main", "run_command"]
