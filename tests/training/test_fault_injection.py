"""Training survives SIGKILL anywhere: killed runs, rerun with the same command until they
finish, end bitwise where an uninterrupted run ends (CPU, float32).

Each run is `python -m transformer_mt train` in a subprocess, killed with SIGKILL either at a
random step (the test polls metrics.jsonl and kills from outside, wherever the child then is:
forward, backward, validation or a save) or during a checkpoint save (fault_hook/sitecustomize.py
makes the child kill itself just before its k-th rename into checkpoints/, leaving a temporary
file behind and the final name unreplaced). After every kill the rerun must resume from the
checkpoint the killed run left (last.pt, else the newest step file) and not start over.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from transformer_mt import artifacts, run_layout
from transformer_mt.training.metrics import read_metrics

from .conftest import write_config, write_corpus

REPO = Path(__file__).resolve().parents[2]
HOOK = Path(__file__).resolve().parent / "fault_hook"
MAX_STEPS, VALID_EVERY = 30, 3
TRAIN = f"max_steps: {MAX_STEPS}, valid_every: {VALID_EVERY}, keep_last: 2, update_freq: 2"
TIMEOUT = 300  # seconds per process: generous, the machine may be shared


@dataclass
class Kill:
    kind: str  # "step": from outside once metrics.jsonl reports `at`; "rename": the hook's k
    at: int
    delay: float = 0.0  # after step `at` is seen: anywhere in the next update


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny config (dropout, BPE-dropout, accumulation, epoch ends, pruning) and the run
    directory of one uninterrupted run of it."""
    directory = tmp_path_factory.mktemp("fault")
    write_corpus(directory, n_train=120)
    config = write_config(
        directory, train=f"{TRAIN}, valid_bleu: false", tokenizer="bpe_dropout: 0.1"
    )
    reference = directory / "reference"
    proc = _start(config, reference, directory / "reference.log")
    with _reaped(proc):
        assert proc.wait(TIMEOUT) == 0, _tail(directory / "reference.log")
    return config, reference


@pytest.mark.slow  # 30 s: four training processes; in-process resumes are tested by default
def test_killed_run_resumes_to_the_uninterrupted_result(experiment, tmp_path):
    """One kill during a checkpoint save, one at a random step."""
    config, reference = experiment
    rng = random.Random(17)
    kinds = ["rename", "step"]
    rng.shuffle(kinds)
    run_with_kills(config, tmp_path / "run", kinds, rng)
    assert_same_run(tmp_path / "run", reference)


@pytest.mark.slow
def test_ten_kills_over_five_runs(experiment, tmp_path):
    config, reference = experiment
    rng = random.Random(2024)
    for i in range(5):
        run_dir = tmp_path / f"run{i}"
        run_with_kills(config, run_dir, ["rename", "step"] if i % 2 else ["step", "rename"], rng)
        assert_same_run(run_dir, reference)


def run_with_kills(config: Path, run_dir: Path, kinds: list[str], rng: random.Random) -> None:
    """Start the run once per kill and kill it as planned, then rerun it until it finishes."""
    for n, kind in enumerate([*kinds, "none"]):
        resume_step = _expected_resume_step(run_dir)
        kill = _plan(kind, run_dir, resume_step, rng)
        log = run_dir.parent / f"{run_dir.name}.{n}.log"
        proc = _start(config, run_dir, log, kill_at_rename=kill.at if kill.kind == "rename" else 0)
        with _reaped(proc):
            if kill.kind == "step":
                _kill_at_step(proc, run_dir / "metrics.jsonl", kill, log)
            code = proc.wait(TIMEOUT)
        expected = 0 if kill.kind == "none" else -signal.SIGKILL
        assert code == expected, f"{kill}: exit status {code}\n{_tail(log)}"
        if resume_step:  # the rerun continued where the killed run's checkpoint left it
            found = re.search(r"resumed from \S+ at step (\d+)", log.read_text())
            assert found and int(found.group(1)) == resume_step, _tail(log)


def _plan(kind: str, run_dir: Path, resume_step: int, rng: random.Random) -> Kill:
    """A seeded kill point the process surely reaches before it ends."""
    saves_left = (MAX_STEPS - resume_step) // VALID_EVERY
    if kind == "rename":  # each save renames at least two files (periodic file, last.pt)
        return Kill(kind, rng.randint(1, min(5, 2 * saves_left)))
    if kind == "step":
        rows = (
            read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []
        )
        seen = max((r["step"] for r in rows), default=0)  # a later row is the new process's
        target = rng.randint(seen + 1, max(seen + 1, MAX_STEPS - 6))
        return Kill(kind, target, delay=rng.uniform(0, 0.02))
    return Kill(kind, 0)


def _kill_at_step(proc: subprocess.Popen, metrics: Path, kill: Kill, log: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while proc.poll() is None and time.monotonic() < deadline:
        if metrics.exists() and any(r["step"] >= kill.at for r in read_metrics(metrics)):
            time.sleep(kill.delay)
            os.killpg(proc.pid, signal.SIGKILL)
            return
        time.sleep(0.002)
    raise AssertionError(f"the run ended before step {kill.at}\n{_tail(log)}")


def _expected_resume_step(run_dir: Path) -> int:
    """The step of last.pt, else of the newest step file, else 0 (no file is damaged here)."""
    directory = run_dir / "checkpoints"
    for path in [directory / "last.pt", *reversed(run_layout.periodic_checkpoints(directory))]:
        if path.exists():
            return artifacts.load_checkpoint(path).step
    return 0


def assert_same_run(run_dir: Path, reference: Path) -> None:
    """Bitwise equal last.pt and best.pt, the same checkpoint files, no temporaries left."""
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == sorted(p.name for p in (reference / "checkpoints").iterdir())
    for name in ("last.pt", "best.pt"):
        got = artifacts.load_checkpoint(run_dir / "checkpoints" / name)
        want = artifacts.load_checkpoint(reference / "checkpoints" / name)
        assert got.step == want.step and got.training.data_position == want.training.data_position
        assert got.model.keys() == want.model.keys()
        for key, tensor in want.model.items():
            assert torch.equal(got.model[key], tensor), (name, key)
        for index, state in want.training.optimizer["state"].items():
            for key, tensor in state.items():
                assert torch.equal(got.training.optimizer["state"][index][key], tensor), (name, key)
    steps = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]
    assert steps == list(range(1, MAX_STEPS + 1))


@pytest.mark.slow
def test_a_killed_streamed_run_leaves_no_data_worker_behind_and_resumes(tmp_path):
    """Its workers, forked with the run directory's lock, had lived on after the trainer's
    SIGKILL (blocked handing over a chunk), and every rerun was refused as another run's."""
    write_corpus(tmp_path, n_train=3000)
    config = write_config(tmp_path, train="max_steps: 12, valid_every: 3, valid_bleu: false")
    sections = yaml.safe_load(config.read_text(encoding="utf-8"))
    sections["data"].update(streaming=True, shuffle_buffer=256, workers=2)
    config.write_text(yaml.safe_dump(sections, sort_keys=False), encoding="utf-8")
    run_dir, mark = tmp_path / "run", f"tmt-test-{os.getpid()}-{time.monotonic_ns()}"
    proc = _start(config, run_dir, tmp_path / "killed.log", kill_at_rename=3, mark=mark)
    try:
        with _reaped(proc):
            assert proc.wait(TIMEOUT) == -signal.SIGKILL, _tail(tmp_path / "killed.log")
        deadline = time.monotonic() + 30
        while _marked(mark):
            assert time.monotonic() < deadline, "a data worker outlived its trainer"
            time.sleep(0.1)
    finally:
        for pid in _marked(mark):  # the test's own leftovers, whatever it found
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    rerun = _start(config, run_dir, tmp_path / "rerun.log")
    with _reaped(rerun):
        assert rerun.wait(TIMEOUT) == 0, _tail(tmp_path / "rerun.log")
    assert "resumed from" in (tmp_path / "rerun.log").read_text(encoding="utf-8")


def _marked(mark: str) -> list[int]:
    """The processes whose environment holds TMT_TEST_MARK=`mark` (a run and its workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and f"TMT_TEST_MARK={mark}".encode() in (
                entry / "environ"
            ).read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def _start(
    config: Path, run_dir: Path, log: Path, kill_at_rename: int = 0, mark: str = ""
) -> subprocess.Popen:
    env = {
        **os.environ,
        "TMT_TEST_MARK": mark,
        "PYTHONPATH": os.pathsep.join([str(HOOK), str(REPO)]),
        "TMT_KILL_AT_RENAME": str(kill_at_rename),
        # One thread in every run: float sums split over another thread count can differ in
        # the last bit, and auto threads follow the machine's load.
        "OMP_NUM_THREADS": "1",
    }
    cmd = [sys.executable, "-m", "transformer_mt", "train", "--config", str(config)]
    with open(log, "w", encoding="utf-8") as stderr:
        return subprocess.Popen(
            [*cmd, "--run-dir", str(run_dir)],
            cwd=config.parent,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # its own process group: killed as a whole, never leaked
        )


@contextlib.contextmanager
def _reaped(proc: subprocess.Popen) -> Iterator[None]:
    """Whatever happens in the test, the child's process group does not outlive it."""
    try:
        yield
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
