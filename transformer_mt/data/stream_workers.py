"""The lives of the streaming reader processes (streaming.py's DataLoader workers): they
leave signals to the training process and never outlive it.

A signal meant for the run (Ctrl-C, SIGHUP, `timeout`'s SIGTERM to the process group) reaches
every worker too; the trainer is the one that answers it, by finishing its update, saving and
stopping the workers. A trainer that dies without that chance (SIGKILL) takes its workers with
it, so that none holds the run directory's lock.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading


def leave_signals_to_the_trainer(worker_id: int) -> None:
    """Workers leave Ctrl-C, SIGHUP and another process's SIGTERM to the training process,
    which finishes its update, saves and stops them; a worker killed by one would fail the
    batches that update still reads. Such signals reach every process of the group at once
    (Ctrl-C, `timeout`, `kill -- -PGID`, a job scheduler).

    The trainer's own SIGTERM (`Process.terminate`, which a DataLoader and Python's exit send
    to workers that do not stop when asked) still ends a worker at once: SIGTERM is blocked and
    a thread takes each one with its sender's PID, so that none is ignored that the exit waits
    on. A worker outlives no training process (`_end_with_the_trainer`).
    """
    _end_with_the_trainer(os.getppid())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not hasattr(signal, "sigwaitinfo"):  # not POSIX: Ctrl-C only
        return
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not a handler forked from the trainer
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # threads made later inherit it
    threading.Thread(target=_end_on_the_trainers_sigterm, args=(os.getppid(),), daemon=True).start()


def _end_with_the_trainer(trainer: int) -> None:
    """Have the kernel kill this worker when the trainer ends (Linux's PR_SET_PDEATHSIG), by
    SIGKILL too, which leaves the trainer no moment to stop its workers. torch's workers notice
    a parent gone only while they wait for work: one blocked handing over a chunk lived on,
    holding the run directory's lock, which it inherited, so that no rerun could resume. (The
    kernel's parent is the thread that started the worker: the trainer's main thread, which
    reads the batches.)"""
    try:
        set_death_signal = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return
    set_death_signal(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != trainer:  # it ended before the request: no signal will come
        os._exit(1)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _end_on_the_trainers_sigterm(trainer: int) -> None:
    while signal.sigwaitinfo({signal.SIGTERM}).si_pid != trainer:
        pass  # another process's: the trainer stops this worker when it has saved
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # this thread's mask
    os.kill(os.getpid(), signal.SIGTERM)  # taken by this thread: ends as SIGTERM would have
