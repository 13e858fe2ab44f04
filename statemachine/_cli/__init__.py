"""The ``agentfsm`` command: one module per group of subcommands, ``main`` the entry point."""

from ._main import main

__all__ = ["main"]
