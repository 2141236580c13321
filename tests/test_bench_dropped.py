"""scripts/benchmark.py dropped: labels from the single sentences' translations, precision and
recall, and the rows and tables on the tiny checkpoint."""

from __future__ import annotations

import io

import pytest

from tests.benches import bench_args, import_bench, source_and_reference

SOURCES = ["Ein mann fährt rad.", "Zwei hunde spielen.", "Eine frau liest.", "Das buch."] * 3


@pytest.fixture
def bench_dropped(monkeypatch):
    return import_bench(monkeypatch, "bench_dropped")


def test_a_line_dropped_content_when_short_or_missing_a_sentences_words(bench_dropped):
    singles = ["A man rides a bike.", "Two dogs play in the snow."]
    assert not bench_dropped.dropped("A man rides a bike. Two dogs play in the snow.", singles)
    assert bench_dropped.dropped("A man rides a bike.", singles)  # shorter than 0.7
    # as long, but half of the first sentence's words are gone
    assert bench_dropped.dropped("Two dogs play in the snow with a big ball.", singles)
    assert bench_dropped.word_share("a man, a bike", {"a": 1, "man": 1, "bike": 1}) == 0.75


def test_precision_and_recall_count_hits_false_alarms_and_misses(bench_dropped):
    found = bench_dropped.precision_recall([True, True, False, False], [True, False, True, False])
    assert found == {"tp": 1, "fp": 1, "fn": 1, "precision": 0.5, "recall": 0.5}
    assert bench_dropped.precision_recall([False], [False])["precision"] is None


def test_rows_and_tables(bench_dropped, checkpoint, tmp_path):
    args = bench_args(
        bench_dropped,
        ["--checkpoint", str(checkpoint), *source_and_reference(tmp_path, SOURCES)]
        + ["--joins", "2", "3", "--beam-size", "1", "--batch-size", "4"],
    )
    rows = bench_dropped.run(args)
    kinds = [row["kind"] for row in rows]
    assert kinds == ["flag"] * 5 + ["set"] * 3 + ["retry"] * 3 + ["cost"] * 2
    sets = {row["set"]: row for row in rows if row["kind"] == "set"}
    assert {name: row["lines"] for name, row in sets.items()} == {"1": 12, "2": 6, "3": 4}
    assert sets["1"]["dropped"] == 0  # single sentences are their own yardstick
    flags = {row["flag"]: row for row in rows if row["kind"] == "flag"}
    assert flags["any"]["tp"] + flags["any"]["fn"] == sum(r["dropped"] for r in sets.values())
    assert all(row["items"] == 22 and row["threads"] >= 1 for row in rows)
    table = io.StringIO()
    bench_dropped.print_table(rows, file=table)
    text = table.getvalue()
    assert text.startswith("| flag | flagged dropped |") and "| any |" in text
    assert "| sentences a line | flagged | retried | cleared |" in text
    assert text.rstrip().endswith("22 items checked") and "batches of 4 sentences" in text
