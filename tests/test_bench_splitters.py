"""scripts/benchmark.py splitters: exact recovery, marked lines and boundary arithmetic on a
stub splitter."""

from __future__ import annotations

import io

import pytest

from tests.benches import bench_args, import_bench

# Captions as Multi30k has them: one lacks its final mark, one holds an abbreviation.
SENTENCES = ["A dog runs.", "Two men wearing hats", "Mr. Smith sits.", "A cat sleeps!"]


def stub_split(text: str) -> list[str]:
    """Splits after every '. ' and '! ': wrong after 'Mr.', blind where no mark is."""
    pieces, start = [], 0
    for i, char in enumerate(text[:-1]):
        if char in ".!" and text[i + 1] == " ":
            pieces.append(text[start : i + 1])
            start = i + 1
    return [*pieces, text[start:]]


@pytest.fixture
def bench_splitters(monkeypatch):
    return import_bench(monkeypatch, "bench_splitters")


def test_exact_lines_marked_lines_and_boundaries(bench_splitters):
    (one, two, four) = bench_splitters.measure(stub_split, SENTENCES, [1, 2, 4], " ", repeats=2)
    # N=1: every caption alone; "Mr. Smith sits." is cut after "Mr." (a boundary not there).
    one, seconds = one
    assert (one.lines, one.exact, one.marked_lines, one.marked_exact) == (4, 3, 4, 3)
    assert (one.boundaries, one.found, one.right) == (0, 1, 0) and seconds >= 0
    assert one.first_wrong == ["Mr.", "Smith sits."]
    # N=2: "A dog runs. Two men wearing hats" is right; the second line's "Mr." cut is wrong.
    two = two[0].as_row()
    assert (two["lines"], two["exact"], two["marked_lines"], two["marked_exact"]) == (2, 1, 2, 1)
    assert (two["boundaries"], two["found"], two["right"]) == (2, 3, 2)
    assert (two["precision"], two["recall"], two["marked_recall"]) == (0.6667, 1.0, 1.0)
    # N=4: the boundary after "hats" has no mark, so the stub misses it and the line is not
    # marked: it counts in `exact` (wrong) but not among the marked lines.
    four = four[0].as_row()
    assert (four["lines"], four["exact"], four["marked_lines"], four["marked_exact"]) == (
        1,
        0,
        0,
        0,
    )
    assert (four["boundaries"], four["marked"], four["right"], four["marked_right"]) == (3, 2, 2, 2)
    assert four["marked_exact_share"] is None and four["marked_recall"] == 1.0


def test_rows_and_table_with_a_missing_splitter(bench_splitters, tmp_path, monkeypatch):
    (tmp_path / "test2016.en").write_text("\n".join(SENTENCES) + "\n")
    (tmp_path / "test2016.de").write_text("Ein Hund läuft.\nZwei Katzen schlafen.\n")
    Splitter = bench_splitters.Splitter
    stub = Splitter("json", "pytest", lambda lang: stub_split, lambda: {"en"})
    monkeypatch.setitem(bench_splitters.SPLITTERS, "stub", stub)
    missing = Splitter("no_such_splitter_module", "no-such-splitter", lambda lang: stub_split)
    monkeypatch.setitem(bench_splitters.SPLITTERS, "missing", missing)
    args = bench_args(
        bench_splitters,
        ["--data", str(tmp_path), "--langs", "en", "de", "--joins", "1", "2", "--repeats", "1"]
        + ["--splitters", "missing", "stub"],
    )
    rows = bench_splitters.run(args)
    assert rows[0] == {
        "bench": "splitters",
        "splitter": "missing",
        "skipped": "not installed (pip install no-such-splitter)",
    }
    keys = [(row["lang"], row["rules"], row["join"]) for row in rows[1:]]
    # German has no rules in the stub: English ones split it.
    assert keys == [("en", "en", 1), ("en", "en", 2), ("de", "en", 1), ("de", "en", 2)] + [
        ("all", "", 1),
        ("all", "", 2),
    ]
    pooled = rows[-1]
    assert (pooled["lines"], pooled["exact"], pooled["marked_lines"]) == (3, 2, 3)
    table = io.StringIO()
    bench_splitters.print_table(rows, file=table)
    text = table.getvalue()
    # N=1: 5 of 6 captions whole (not "Mr. Smith sits."); N=2: 2 of 3 lines, all marked, and
    # 3 of the 4 boundaries found are right (not the one after "Mr.").
    assert "| stub | 83.3 | 66.7 | 66.7 | 75.0 / 100.0 |" in text
    assert "missing: skipped, not installed (pip install no-such-splitter)" in text
