"""Who holds a run's lease: a name no other process, here or on another host, can have."""

from __future__ import annotations

import os
import socket
import uuid

__all__ = ["new_owner"]


def new_owner() -> str:
    """A lease holder's name: host, process, and a token of its own."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
