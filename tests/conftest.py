"""Shared fixtures: every test leaves the global random state and structlog as it found them,
and the pytest runs tests start in child interpreters skip an unrelated plugin's start-up."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _global_random_untouched() -> Iterator[None]:
    """A simulated run must never draw from (or reseed) the global generator."""
    before = random.getstate()
    yield
    assert random.getstate() == before, "the test changed the global random state"


@pytest.fixture(autouse=True)
def _structlog_restored() -> Iterator[None]:
    before = structlog.get_config()
    yield
    structlog.configure(**before)


#: langsmith (installed with langgraph) registers a pytest plugin that has no part in any
#: test here; loading it, and rewriting the asserts of its 227 modules, adds about a second
#: to every pytest a test starts in a child interpreter (some thirty of them), more where
#: Python may not cache bytecode.  Child runs inherit this through PYTEST_ADDOPTS; the ones
#: that stand for a user's plain pytest, with no PYTEST_* variable, pass it themselves.
CHILD_PYTEST_ADDOPTS = "-p no:langsmith_plugin"


@pytest.fixture(scope="session", autouse=True)
def _child_pytest_skips_langsmith() -> Iterator[None]:
    before = os.environ.get("PYTEST_ADDOPTS")
    os.environ["PYTEST_ADDOPTS"] = f"{before} {CHILD_PYTEST_ADDOPTS}" if before \
        else CHILD_PYTEST_ADDOPTS
    yield
    if before is None:
        del os.environ["PYTEST_ADDOPTS"]
    else:
        os.environ["PYTEST_ADDOPTS"] = before
