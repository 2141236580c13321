"""SIGTERM and SIGHUP end a command as Ctrl-C does: `Interrupted` is raised where the program
is, the `finally` blocks on the way out remove outputs' temporaries, and the command exits
with 128 + the signal's number (`common.run_command`)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

# Signals that end a command as Ctrl-C does (SIGHUP: the terminal closed; not on Windows).
INTERRUPTING_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, as SIGINT raises KeyboardInterrupt: the
    `finally` blocks on the way out remove outputs' temporaries (`files.atomic_path`)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def interrupting_signals(enabled: bool = True) -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP raise `Interrupted` in the main thread.

    Without this, they kill the process on the spot and a command writing an output leaves its
    temporary behind, where Ctrl-C removes it. Left alone: a signal ignored when the command
    started (`nohup` ignores SIGHUP), or one some code set a handler for already. A second
    signal acts as it did before (it kills), so a stuck cleanup can still be stopped; a forked
    child (a data-loading worker) that inherited the handler dies by the signal as before.
    Training sets its own handlers around its loop (training/signals.py), which save first.
    """
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)
        if os.getpid() != owner:
            os.kill(os.getpid(), signum)
            return
        raise Interrupted(signum)

    previous = {}
    for signum in INTERRUPTING_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:
            previous[signum] = signal.signal(signum, interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
