"""Data-parallel training on CPU (gloo), on one node or two, equals one process that sees both
ranks' batches."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer_mt.training.distributed import DistributedContext

from .ddp_worker import assert_trained_alike, tiny_trainer

WORKER = Path(__file__).with_name("ddp_worker.py")
REPO = Path(__file__).resolve().parents[2]


def _launch(out: Path, nodes: int) -> None:
    """Two ranks of ddp_worker.py: one torchrun of two processes, or two torchruns ("nodes")
    of one process each meeting at a c10d rendezvous on localhost, as `docs` shows for
    several machines."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    run = [sys.executable, "-m", "torch.distributed.run"]
    if nodes == 1:
        commands = [[*run, "--standalone", "--nproc_per_node", "2"]]
    else:
        endpoint = f"127.0.0.1:{_free_port()}"
        rendezvous = ["--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", "t"]
        node = [*run, "--nnodes", "2", "--nproc_per_node", "1", *rendezvous]
        commands = [node, node]
    launches = [
        subprocess.Popen(
            [*command, str(WORKER), str(out)], env=env, stderr=subprocess.PIPE, text=True
        )
        for command in commands
    ]
    for launch in launches:
        _, err = launch.communicate(timeout=180)
        assert launch.returncode == 0, err[-3000:]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("nodes", [1, 2], ids=["one-node", "two-nodes"])
def test_two_ranks_match_each_other_and_one_process(tmp_path, nodes):
    _launch(tmp_path, nodes)
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
