"""Stop requests: SIGINT/SIGTERM during training set a flag instead of killing the process.

The loop checks the flag after each update, so the update in flight finishes and last.pt is
saved before the exit; a second signal acts as usual (the previous handlers are back). The exit
status is the shell's 128 + signal number, as if the signal had killed the process, so that
`tmt train && tmt average ...` and scripts stop instead of treating the run as finished.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

EXIT_CODES = {signal.SIGINT: 128 + signal.SIGINT, signal.SIGTERM: 128 + signal.SIGTERM}


class StopRequests:
    """The first SIGINT/SIGTERM caught while `caught()` is active, or None."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def caught_one(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGTERM).name

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.signum or signal.SIGTERM]

    @contextmanager
    def caught(self) -> Iterator[None]:
        """Catch the signals in this block (handlers can only be set from the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.getsignal(s) for s in EXIT_CODES}

        def handler(signum: int, frame: Any) -> None:
            self.signum = signum
            for s, h in previous.items():
                signal.signal(s, h)

        for s in EXIT_CODES:
            signal.signal(s, handler)
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
