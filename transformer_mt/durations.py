"""Durations as progress lines print them, and how often those lines come, for training
(`training.progress`) and translation (`inference.stream`) alike."""

from __future__ import annotations

# Seconds between plain progress lines when the output is a log file, not a terminal.
PROGRESS_SECONDS = 30.0


def duration(seconds: float) -> str:
    """`1h02m`, `12m03s`, `45s` (whole seconds, rounded down); `?` for an unknown (infinite)
    time."""
    if seconds == float("inf"):
        return "?"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
