"""The real engine of a checkpoint behind the real server on a loopback port, for the
module-scoped fixtures of the tests that need it: started once per module, stopped without
draining after its last test. Import it after `pytest.importorskip("fastapi")`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from transformer_mt.serve.engine import Engine, ServeLimits
from transformer_mt.serve.server import start_in_thread


def serving(checkpoint: Path, limits: ServeLimits) -> Iterator[tuple[str, Engine]]:
    """For a fixture to `yield from`: (url, engine) while the module's tests run."""
    engine = Engine.from_checkpoint(str(checkpoint), limits=limits)
    url, stop = start_in_thread(engine)
    yield url, engine
    stop(drain=False)
