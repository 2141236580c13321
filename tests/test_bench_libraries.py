"""scripts/bench_libraries.py: a library skipped or measured, the best of timed passes, and the
lines under the tables of the library benchmarks."""

from __future__ import annotations

import io

import pytest

from tests.benches import import_bench


@pytest.fixture
def bench_libraries(monkeypatch):
    return import_bench(monkeypatch, "bench_libraries")


def test_a_missing_library_is_a_skipped_row_and_an_installed_one_has_its_fields(bench_libraries):
    missing = bench_libraries.library_fields("b", "tool", "x", "no_such_module", "no-such-dist")
    assert missing == {
        "bench": "b",
        "tool": "x",
        "skipped": "not installed (pip install no-such-dist)",
    }
    found = bench_libraries.library_fields("b", "tool", "json", "json", "pytest")
    assert found["package"].startswith("pytest ") and found["install_mb"] > 0
    assert (found["bench"], found["tool"], found["cpus"] >= 1) == ("b", "json", True)


def test_one_call_per_line_and_at_least_one_pass(bench_libraries):
    calls = []
    found, seconds = bench_libraries.time_per_line(calls.append, ["a", "b"], repeats=0)
    assert (found, calls, seconds >= 0) == ([None, None], ["a", "b"], True)
    bench_libraries.time_per_line(calls.append, ["c"], repeats=3)
    assert calls == ["a", "b", "c", "c", "c"]
    assert (bench_libraries.share(1, 3), bench_libraries.share(1, 0)) == (0.3333, None)


def test_the_footer_names_the_skipped_and_the_measured(bench_libraries):
    rows = [
        {"tool": "x", "skipped": "not installed (pip install x)"},
        {"tool": "y", "package": "y 1.0", "cpus": 1},
        {"tool": "z", "package": "z 2.0", "cpus": 4},
    ]
    text = io.StringIO()
    bench_libraries.print_footer(rows, "tool", text)
    assert text.getvalue() == (
        "x: skipped, not installed (pip install x)\none line per call, 1/4 cores; y 1.0, z 2.0\n"
    )
