"""Fixtures of the provider tests: loopback servers and models closed at the end."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from agentfsm.providers import RetryPolicy
from tests.providers.fake_server import FakeServer

#: Three attempts, little waiting: failing tests stay fast.
FAST_RETRY = RetryPolicy(backoff=0.01)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    yield fake
    fake.close()


@pytest.fixture
def make_server() -> Iterator[Callable[[str], FakeServer]]:
    """More servers for one test (a prefix such as ``/v1`` is part of the url)."""
    servers: list[FakeServer] = []

    def make(prefix: str = "") -> FakeServer:
        servers.append(FakeServer(prefix))
        return servers[-1]

    yield make
    for fake in servers:
        fake.close()


@pytest.fixture
async def closing() -> AsyncIterator[Callable[[Any], Any]]:
    """Register models to be closed when the test ends."""
    models: list[Any] = []

    def register(model: Any) -> Any:
        models.append(model)
        return model

    yield register
    for model in models:
        await model.aclose()


@pytest.fixture
def make_model(server: FakeServer, closing: Callable[[Any], Any]) -> Callable[..., Any]:
    """``make_model(Model, name, **options)``: a model calling ``server``, with a short
    timeout and backoff so failing tests stay fast, closed when the test ends."""

    def make(cls: Callable[..., Any], name: str, **options: Any) -> Any:
        return closing(
            cls(name, **{"base_url": server.url, "timeout": 2.0, "retry": FAST_RETRY, **options})
        )

    return make


def checked_server(path: str, validate: Callable[[Any], None], prefix: str = "") -> Any:
    """A module's ``server`` fixture: the loopback server under ``prefix``; every
    request it got must go to ``path`` and pass ``validate`` (the SDK's types)."""

    @pytest.fixture
    def server(server: FakeServer) -> Iterator[FakeServer]:
        server.prefix = prefix
        yield server
        server.check_requests(path, validate)

    return server


def model_fixture(cls: Any, name: str, api_key: str) -> Any:
    """A module's ``chat`` fixture: ``chat(**options)`` makes a ``cls`` calling ``server``."""

    @pytest.fixture
    def chat(make_model: Callable[..., Any]) -> Callable[..., Any]:
        return functools.partial(make_model, cls, name, api_key=api_key)

    return chat
