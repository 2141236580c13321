"""The engine the HTTP tests run against: the fake, started for each test and stopped after it.
test_engine.py, which tests the real engine, defines its own `engine`."""

import pytest

from tests.serve.fakes import FakeEngine


@pytest.fixture
def engine():
    engine = FakeEngine()
    engine.start()
    yield engine
    engine.stop(drain=False)
