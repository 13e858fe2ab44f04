"""The agentfsm pytest plugin."""
