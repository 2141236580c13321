"""Data-parallel training on CPU (gloo) equals one process that sees both ranks' batches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from transformer_mt.training.distributed import DistributedContext

from .ddp_worker import assert_trained_alike, tiny_trainer

WORKER = Path(__file__).with_name("ddp_worker.py")
REPO = Path(__file__).resolve().parents[2]


def test_two_ranks_match_each_other_and_one_process(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run(
        [*cmd, str(WORKER), str(tmp_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rank0 = torch.load(tmp_path / "rank0.pt")
    rank1 = torch.load(tmp_path / "rank1.pt")

    # One process, two batches per update: rank r's share is batches r, r + 2, ... so update k
    # of the 2-rank run saw batches 2k and 2k + 1, exactly what this run accumulates.
    single = tiny_trainer(tmp_path / "single", DistributedContext(), update_freq=2)
    start = {k: v.clone() for k, v in single.model.state_dict().items()}
    single.train()
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), name
    assert_trained_alike(rank0, single.model.state_dict())
    assert any(not torch.equal(start[k], rank0[k]) for k in start)  # training moved the weights
