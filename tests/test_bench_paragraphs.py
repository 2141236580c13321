"""scripts/benchmark.py paragraphs: rows for each join with splitting on and off, and the
like-for-like baseline, on the tiny checkpoint."""

from __future__ import annotations

import io

import pytest

from tests.benches import bench_args, import_bench, source_and_reference

SOURCES = ["Ein mann fährt rad.", "Zwei hunde spielen.", "Eine frau liest.", "Das buch."]


@pytest.fixture
def bench_paragraphs(monkeypatch):
    return import_bench(monkeypatch, "bench_paragraphs")


def test_rows_and_table(bench_paragraphs, checkpoint, tmp_path):
    args = bench_args(
        bench_paragraphs,
        ["--checkpoint", str(checkpoint), *source_and_reference(tmp_path, SOURCES)]
        + ["--joins", "1", "2", "--beam-size", "1"],
    )
    rows = bench_paragraphs.run(args)
    assert [(row["join"], row["split"], row["lines"]) for row in rows] == [
        (1, True, 4),
        (2, True, 2),
        (1, False, 4),
        (2, False, 2),
    ]
    by_key = {(row["join"], row["split"]): row for row in rows}
    # Lines of one sentence translate alike either way; joined lines split exactly into their
    # sentences, so their translation is the single sentences' joined after translation.
    assert by_key[1, True]["bleu"] == by_key[1, False]["bleu"]
    assert by_key[2, True]["bleu"] == by_key[2, True]["single_joined_bleu"]
    assert "single_joined_bleu" not in by_key[2, False]
    table = io.StringIO()
    bench_paragraphs.print_table(rows, file=table)
    lines = table.getvalue().splitlines()
    assert lines[0].startswith("| sentences a line | lines |") and len(lines) == 5
    assert lines[3].startswith("| 2 | 2 |") and "| +0.00 |" in lines[3]
