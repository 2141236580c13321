"""Stop requests: SIGINT, SIGTERM and SIGHUP during training set a flag instead of killing the
process.

The loop checks the flag after each update, so the update in flight finishes and last.pt is
saved before the exit; a second signal acts as usual (the previous handlers are back). SIGHUP is
what a closed terminal or a dropped SSH connection sends: it stops a run as Ctrl-C does, saving
first. A signal ignored when training starts (`nohup` ignores SIGHUP) stays ignored. The exit
status is the shell's 128 + signal number, as if the signal had killed the process, so that
`tmt train && tmt average ...` and scripts stop instead of treating the run as finished.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

# The signals that stop a run (SIGHUP: not on Windows), with the exit status of each.
EXIT_CODES = {
    signum: 128 + signum
    for signum in (
        getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
    )
}


class StopRequests:
    """The first stopping signal (`EXIT_CODES`) caught while `caught()` is active, or None."""

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
        """Catch the signals in this block (handlers can only be set from the main thread),
        but those ignored as it starts."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.getsignal(s) for s in EXIT_CODES}
        previous = {s: h for s, h in previous.items() if h is not signal.SIG_IGN}

        def handler(signum: int, frame: Any) -> None:
            self.signum = signum
            for s, h in previous.items():
                signal.signal(s, h)
            # Said at once: a validation may take minutes before the stop is seen, and a user
            # who sees nothing sends the second signal, which stops without saving.
            log.warning(
                "%s: stopping once the update or validation in progress ends, last.pt saved; "
                "a second signal stops at once without saving",
                self.name,
            )

        for s in previous:
            signal.signal(s, handler)
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
