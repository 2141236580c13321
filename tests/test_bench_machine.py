"""What a benchmark says of the machine it ran on (scripts/bench_machine.py): the work other
processes did on the cores a timed run may use, and the note the translation table prints
from it."""

import io
import os

from tests.benches import import_bench

# /proc/stat of a 2-core machine: cpu (all), cpu0, cpu1; user nice system idle iowait irq
# softirq steal guest guest_nice, in clock ticks.
STAT = """cpu  700 10 90 5000 40 0 5 3 0 0
cpu0 600 0 60 2000 30 0 3 2 0 0
cpu1 100 10 30 3000 10 0 2 1 0 0
intr 12345 0 0
ctxt 999
"""


def test_busy_seconds_count_only_the_given_cores_and_their_busy_states(monkeypatch):
    machine = import_bench(monkeypatch, "bench_machine")
    tick = os.sysconf("SC_CLK_TCK")
    assert machine.busy_seconds(STAT, {1}) == (100 + 10 + 30 + 2) / tick
    assert machine.busy_seconds(STAT, {0, 1}) == (600 + 60 + 3 + 100 + 10 + 30 + 2) / tick
    assert machine.busy_seconds(STAT, {2}) == 0.0


def test_others_is_the_busy_time_of_the_cores_less_this_processs(monkeypatch):
    machine = import_bench(monkeypatch, "bench_machine")
    samples = iter([(10.0, 50.0, 3.0), (12.0, 53.0, 4.0)])  # (wall, busy, own CPU seconds)
    monkeypatch.setattr(machine.CoreShare, "_sample", lambda self: next(samples))
    assert machine.CoreShare().others() == 1.0  # 3 s busy in 2 s, 1 s of them ours
    samples = iter([(10.0, 50.0, 3.0), (12.0, 51.9, 5.0)])  # ticks short of our own time
    assert machine.CoreShare().others() == 0.0


def _row(others: float) -> dict:
    return {
        "system": "ours", "beam": 5, "batch": 64, "sent_per_s": 10.0, "tok_per_s": 100.0,
        "best_s": 1.0, "cpu_s": 1.0, "load_before": 2.0, "others": others, "model": "tiny",
        "fixed_length": None, "cpu": "a CPU", "threads": 1, "torch": "2",
    }  # fmt: skip


def test_the_table_says_a_run_was_shared_only_when_its_own_cores_were(monkeypatch):
    """A load of 2 on two cores is no note when the run was pinned to a core nothing else
    used (the work was on the other core); other processes on its own core are."""
    bench = import_bench(monkeypatch, "bench_translate")
    quiet, shared = io.StringIO(), io.StringIO()
    bench.print_table([_row(0.0)], file=quiet)
    bench.print_table([_row(0.0), _row(0.5)], file=shared)
    assert "other processes" not in quiet.getvalue()
    assert "other processes took up to 0.5 of " in shared.getvalue()
