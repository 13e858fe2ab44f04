"""``python -m agentfsm``: the ``agentfsm`` command."""

from ._cli import run_command

if __name__ == "__main__":
    run_command()
