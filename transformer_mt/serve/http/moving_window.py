"""Exact moving-window counts for rate limits, in memory that follows the requests counted,
not their size.

A request passes a limit when the units counted for its holder in the last 60 seconds, its own
included, are within the limit: exact (no 60 s ever holds more than the limit, which is what an
operator promises a customer) and LibreTranslate's strategy (flask-limiter's moving window), so
its operators' numbers mean the same here. Each holder keeps one (time, units) entry per
request counted in the window and their sum. The `limits` library's moving window, which this
replaces, keeps one entry per unit and prepends a request's units to a list it copies: a key of
10^12 characters a minute sent 2.5 MB requests and grew the server from 384 MB to 4 GB, and
/health waited up to 2.2 s behind the copies (one 2-core AMD EPYC). A fixed window would let
a client send twice its limit across a window's edge; a sliding window counter (two numbers)
up to about twice around a minute's edge when a client bunches its requests there.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

WINDOW_SECONDS = 60.0


@dataclass
class _Counted:
    entries: deque[tuple[float, int]] = field(default_factory=deque)  # (time, units), oldest first
    total: int = 0  # the units of `entries`


class MovingWindows:
    """The units counted for each holder (a key's characters, an address's requests) in the
    last `seconds`. Not thread-safe: the server's event loop is its one user. Counts start from
    zero with the process."""

    def __init__(self, seconds: float = WINDOW_SECONDS):
        self.seconds = seconds
        self._counted: dict[str, _Counted] = {}
        self._swept = time.monotonic()

    def fits(self, holder: str, amount: int, cost: int) -> bool:
        """Whether `cost` more units keep `holder` within `amount` in the window."""
        return self._window(holder, time.monotonic()).total + cost <= amount

    def hit(self, holder: str, cost: int) -> None:
        """Count `cost` units for `holder` now."""
        now = time.monotonic()
        window = self._counted[holder] = self._window(holder, now)
        window.entries.append((now, cost))
        window.total += cost

    def retry_after(self, holder: str, amount: int, cost: int) -> int:
        """The first whole second (at least 1) after which `cost` units fit `amount`, if nothing
        else is counted meanwhile: when enough of the oldest entries have left the window (an
        entry counted at t leaves it at t + seconds)."""
        now = time.monotonic()
        window = self._window(holder, now)
        remaining, leaves = window.total, now
        for counted_at, units in window.entries:
            if remaining + cost <= amount:
                break
            remaining -= units
            leaves = counted_at + self.seconds
        return max(1, math.ceil(leaves - now))

    def _window(self, holder: str, now: float) -> _Counted:
        """`holder`'s counts without the entries that left the window; once a window, the
        holders with none left are forgotten (a server sees many client addresses)."""
        if now - self._swept >= self.seconds:
            self._swept = now
            idle = [h for h, w in self._counted.items() if self._idle(w, now)]
            for name in idle:
                del self._counted[name]
        window = self._counted.get(holder) or _Counted()
        while window.entries and window.entries[0][0] <= now - self.seconds:
            window.total -= window.entries.popleft()[1]
        return window

    def _idle(self, window: _Counted, now: float) -> bool:
        return not window.entries or window.entries[-1][0] <= now - self.seconds
