"""What a benchmark says of the machine it ran on: the note the translation table prints
from the work other processes did on the cores a timed run may use (`machine.OtherWork`)."""

import io

from tests.benches import import_bench


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
