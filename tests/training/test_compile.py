"""train.compile: the torch.compile'd training step learns what the eager one does."""

from __future__ import annotations

import functools

import pytest
import torch

from transformer_mt.errors import TmtError
from transformer_mt.training.distributed import DistributedContext
from transformer_mt.training.execution import missing_cpu_compiler

from .ddp_worker import assert_trained_alike, tiny_trainer


@pytest.mark.skipif(
    missing_cpu_compiler() is not None, reason="torch.compile on CPU needs a C++ compiler"
)
@pytest.mark.parametrize(
    "backend",
    [
        # Dynamo's graphs of the step, run by eager kernels: seconds.
        pytest.param("eager"),
        # What train.compile runs, Inductor's generated C++: a minute with a cold cache.
        pytest.param("inductor", marks=pytest.mark.slow),
    ],
)
def test_compiled_training_matches_eager(tmp_path, monkeypatch, backend):
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=backend))
    eager = tiny_trainer(tmp_path / "eager", DistributedContext(), update_freq=1)
    compiled = tiny_trainer(
        tmp_path / "compiled", DistributedContext(), update_freq=1, compile=True
    )
    start = {k: v.clone() for k, v in compiled.model.state_dict().items()}
    eager.train()
    compiled.train()
    assert (
        compiled.updater.wrapped is not compiled.model
    )  # the step really ran through torch.compile
    trained = compiled.model.state_dict()
    assert_trained_alike(trained, eager.model.state_dict())
    assert any(not torch.equal(start[k], trained[k]) for k in start)  # training moved the weights


def test_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    with pytest.raises(TmtError, match="train.compile: .*'no-such-c\\+\\+-compiler' was not found"):
        tiny_trainer(tmp_path, DistributedContext(), update_freq=1, compile=True)
