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

from transformer_mt.artifacts import load_checkpoint
from transformer_mt.training.distributed import DistributedContext

from .conftest import write_config, write_corpus
from .ddp_worker import STEPS, assert_trained_alike, tiny_trainer
from .test_trainer import assert_same_training_state

WORKER = Path(__file__).with_name("ddp_worker.py")
REPO = Path(__file__).resolve().parents[2]


def _launch(out: Path, nodes: int, *args: str) -> None:
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
            [*command, str(WORKER), str(out), *args], env=env, stderr=subprocess.PIPE, text=True
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


# Two nodes on one machine run the same code as one node but for the rendezvous: the slow run.
@pytest.mark.parametrize(
    "nodes", [1, pytest.param(2, marks=pytest.mark.slow)], ids=["one-node", "two-nodes"]
)
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


@pytest.mark.slow
def test_two_ranks_resumed_by_one_process_continue_as_one_process(tmp_path):
    """A checkpoint of two ranks resumed by one process accumulating two batches an update:
    the step, schedule and data position carry over (the one process starts at batch 4 of
    the epoch, where the ranks' 2 + 2 batches end), so it ends where one process that did
    every update ends."""
    _launch(tmp_path, 1, str(STEPS - 1))
    resumed = tiny_trainer(tmp_path / "resumed", DistributedContext(), update_freq=2)
    resumed.restore(load_checkpoint(tmp_path / "run/checkpoints/last.pt"))
    assert resumed.step == STEPS - 1 and resumed.data.train.position.batch_index == 4
    resumed.train()
    single = tiny_trainer(tmp_path / "single", DistributedContext(), update_freq=2)
    single.train()
    assert_trained_alike(resumed.model.state_dict(), single.model.state_dict())


@pytest.mark.slow
def test_two_streaming_ranks_resume_exactly(tmp_path):
    """`tmt train` with data.streaming on two ranks: each rank's stream position goes into the
    checkpoint, and a run stopped at step 6 and resumed ends where an uninterrupted one does
    (the ranks cross epoch ends at different steps). Rank 0 alone logs below ERROR: the
    resume's warning comes once, not once per rank."""
    write_corpus(tmp_path, n_train=120)
    config = write_config(tmp_path, train="keep_last: 10")
    settings = ["data.streaming=true", "data.shuffle_buffer=16", "data.workers=0"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}

    def train(run_dir: Path, *overrides: str) -> str:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += ["--nproc_per_node", "2", "-m", "transformer_mt", "train"]
        command += ["--config", str(config), "--run-dir", str(run_dir), "--set", *settings]
        done = subprocess.run(
            [*command, *overrides], env=env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stderr

    full, part = tmp_path / "full", tmp_path / "part"
    train(full)
    train(part, "train.max_steps=6")
    assert train(part).count("resuming with changed settings: train.max_steps") == 1
    expected = load_checkpoint(full / "checkpoints/last.pt")
    ranks = expected.training.data_position["ranks"]
    assert [r["world_size"] for r in ranks] == [2, 2] and ranks[0]["epoch"] >= 1
    assert_same_training_state(load_checkpoint(part / "checkpoints/last.pt"), expected)
