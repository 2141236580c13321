"""A signal sent to a training's whole process group (Ctrl-C in a terminal, `timeout`,
`kill -- -PGID`, a job scheduler) reaches its data workers too: the run still saves and exits
as the signal says."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from transformer_mt.run_layout import CHECKPOINTS_DIR
from transformer_mt.training.metrics import read_metrics

from .conftest import write_config, write_corpus

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 180  # seconds: generous, the machine may be shared


# SIGTERM by default; Ctrl-C's and a closed terminal's signals, the same path, in the slow run.
@pytest.mark.parametrize(
    "signum",
    [
        signal.SIGTERM,
        pytest.param(signal.SIGINT, marks=pytest.mark.slow),
        pytest.param(signal.SIGHUP, marks=pytest.mark.slow),
    ],
)
def test_a_signal_to_the_group_of_a_streamed_run_saves_it(tmp_path, signum):
    write_corpus(tmp_path, n_train=120)
    config = write_config(tmp_path, train="max_steps: 100000, valid_every: 100000")
    settings = yaml.safe_load(config.read_text(encoding="utf-8"))
    settings["data"] |= {"streaming": True, "workers": 1}
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    run = tmp_path / "run"
    log = tmp_path / "train.log"
    with open(log, "w", encoding="utf-8") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "transformer_mt", "train", "--config", str(config)]
            + ["--run-dir", str(run)],
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # its own process group, as a terminal's job has
            preexec_fn=_signals_at_defaults,
        )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not _trained_steps(run) and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text(encoding="utf-8")
            time.sleep(0.2)
        os.killpg(proc.pid, signum)
        status = proc.wait(TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    said = log.read_text(encoding="utf-8")
    assert status == 128 + signum, said
    assert "Traceback" not in said
    assert (run / CHECKPOINTS_DIR / "last.pt").is_file(), said


def _signals_at_defaults() -> None:
    """In the child: SIGINT and SIGHUP as a terminal delivers them. Started in the background
    (`make test &`, `nohup`), the tests pass them on ignored, and a run leaves a signal alone
    that was ignored when it started."""
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _trained_steps(run: Path) -> int:
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        return 0
    return sum(row["kind"] == "train" for row in read_metrics(metrics))


def _worker(ready) -> None:
    from transformer_mt.data.stream_workers import leave_signals_to_the_trainer

    leave_signals_to_the_trainer(0)
    ready.set()
    time.sleep(TIMEOUT)


@pytest.mark.skipif(not hasattr(signal, "sigwaitinfo"), reason="POSIX signals")
def test_a_worker_outlives_anothers_sigterm_and_ends_on_its_trainers():
    """The trainer's own `terminate()` (a DataLoader that stops a slow worker, Python's exit)
    must end a worker: ignored, the exit would wait on it forever."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    ready = context.Event()
    worker = context.Process(target=_worker, args=(ready,), daemon=True)
    worker.start()
    try:
        assert ready.wait(TIMEOUT)
        for name in ("TERM", "INT", "HUP"):  # from another process, as `kill -- -PGID` sends
            subprocess.run(["kill", f"-{name}", str(worker.pid)], check=True)
        worker.join(1.0)
        assert worker.is_alive()
        worker.terminate()
        worker.join(TIMEOUT)
        assert worker.exitcode == -signal.SIGTERM
    finally:
        if worker.is_alive():
            worker.kill()
