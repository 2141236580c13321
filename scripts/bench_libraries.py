"""What the benchmarks of interchangeable libraries share (bench_splitters.py, bench_langid.py):
whether a library is installed, the fields every row of one carries, the best of repeated
timed passes, and the lines under their tables.

A library that is not installed becomes a row saying so and the run goes on, so that one
command measures whatever a machine has; the tables then say which were skipped and why.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from bench_machine import install_mb, package_version, usable_cores

T = TypeVar("T")


def library_fields(bench: str, role: str, name: str, module: str, distribution: str) -> dict:
    """The fields of every row of library `name` (`role`: "splitter", "identifier"), with its
    `module` imported so that no timed call pays for the import; or, when `module` cannot be
    found, the one row of a skipped library, whose `skipped` says how to install it."""
    if importlib.util.find_spec(module) is None:
        note = f"not installed (pip install {distribution})"
        print(f"{bench}: skipping {name}: {note}", file=sys.stderr)
        return {"bench": bench, role: name, "skipped": note}
    importlib.import_module(module)
    return {
        "bench": bench,
        role: name,
        "package": package_version(distribution),
        "install_mb": install_mb(distribution),
        "cpus": usable_cores(),
    }


def time_per_line(
    call: Callable[[str], T], lines: list[str], repeats: int
) -> tuple[list[T], float]:
    """`call` on each of `lines`, one line per call as an application calls it: the results of
    the last of `repeats` passes (at least one) and the seconds of the fastest, the others
    having been slowed by something other than the library."""
    best, found = float("inf"), []
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        found = [call(line) for line in lines]
        best = min(best, time.perf_counter() - start)
    return found, best


def share(part: int, whole: int) -> float | None:
    """`part / whole` to 4 places; None for nothing to share."""
    return round(part / whole, 4) if whole else None


def print_footer(results: list[dict], role: str, file) -> None:
    """Under the tables: the libraries skipped and why, then the cores and versions measured."""
    for row in results:
        if "skipped" in row:
            print(f"{row[role]}: skipped, {row['skipped']}", file=file)
    measured = [row for row in results if "skipped" not in row]
    packages = sorted({row["package"] for row in measured})
    cpus = sorted({row["cpus"] for row in measured})
    print(f"one line per call, {'/'.join(map(str, cpus))} cores; " + ", ".join(packages), file=file)
