"""scripts/benchmark.py paragraphs: rows for each join with splitting on and off, and the
like-for-like baseline, on the tiny checkpoint."""

from __future__ import annotations

import argparse
import importlib
import io
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SOURCES = ["Ein mann fährt rad.", "Zwei hunde spielen.", "Eine frau liest.", "Das buch."]


@pytest.fixture
def bench_paragraphs(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))  # as benchmark.py imports its modules
    return importlib.import_module("bench_paragraphs")


def test_rows_and_table(bench_paragraphs, checkpoint, tmp_path):
    (tmp_path / "src").write_text("\n".join(SOURCES) + "\n")
    (tmp_path / "ref").write_text("\n".join(s.upper() for s in SOURCES) + "\n")
    parser = argparse.ArgumentParser()
    bench_paragraphs.add_arguments(parser)
    args = parser.parse_args(
        ["--checkpoint", str(checkpoint), "--src", str(tmp_path / "src")]
        + ["--ref", str(tmp_path / "ref"), "--joins", "1", "2", "--beam-size", "1"]
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
