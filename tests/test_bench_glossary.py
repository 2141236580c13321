"""scripts/benchmark.py glossary: term pairs from a parallel corpus by Dice coefficient, and
rows without and with the glossary on the tiny checkpoint."""

from __future__ import annotations

import io

import pytest

from tests.benches import bench_args, import_bench

# German nouns capitalised; "Das" starts each sentence, so it is no noun. Targets spelled with
# the letters of the tiny checkpoint's vocabulary; no noun of the synonym control.
TRAIN = [
    ("Das Buch liest ein Haus", "the buch reads a haus"),
    ("Das Rad fährt ein Haus", "the rad rides a haus"),
    ("Das Buch liest eine Tisch", "the buch reads a tisc"),
    ("Das Rad und das Buch", "the rad and the buch"),
    ("Das Schnee fällt", "the snee falls"),
] * 3
TEST = [
    ("Das Buch liest ein Haus", "the buch is read by a haus"),
    ("Das Rad", "a rad"),
    ("Eine Tisch liest", "someone reads"),
]


@pytest.fixture
def bench_glossary(monkeypatch):
    return import_bench(monkeypatch, "bench_glossary")


def test_terms_are_mutually_best_nouns_by_dice(bench_glossary):
    sources, targets = zip(*TRAIN, strict=True)
    terms = bench_glossary.extract_terms(sources, targets, min_count=3, min_dice=0.5)
    # "Buch" 9 sentences, "Haus" and "Rad" 6, "Tisch" and "Schnee" 3; "Das", "liest": no nouns.
    assert [(s, t) for s, t, _ in terms] == [
        ("Buch", "buch"),
        ("Haus", "haus"),
        ("Rad", "rad"),
        ("Schnee", "snee"),
        ("Tisch", "tisc"),
    ]
    assert terms[0][2] == 1.0 and terms[1][2] == 1.0  # always together
    few = bench_glossary.extract_terms(sources, targets, min_count=4, min_dice=0.5)
    assert [s for s, _, _ in few] == ["Buch", "Haus", "Rad"]


def test_rows_and_table(bench_glossary, checkpoint, tmp_path):
    for split, pairs in (("train", TRAIN), ("test2016", TEST)):
        for side, lang in enumerate(("de", "en")):
            (tmp_path / f"{split}.{lang}").write_text("\n".join(p[side] for p in pairs) + "\n")
    args = bench_args(
        bench_glossary,
        ["--checkpoint", str(checkpoint), "--data", str(tmp_path), "--min-count", "3"]
        + ["--batch-size", "2", "--beam-size", "2", "--repeats", "1"],
    )
    rows = bench_glossary.run(args)
    assert rows[0]["pairs"] == 5
    # The test sentences with a term whose target the reference holds: the first two (three
    # terms); the third's "tisc" is not in its reference. No synonym occurs: no control rows.
    assert [(r["set"], r["glossary"], r["sentences"], r["terms"]) for r in rows[1:]] == [
        ("terms", False, 2, 3),
        ("terms", True, 2, 3),
        ("test2016", False, 3, 3),
        ("test2016", True, 3, 3),
    ]
    # Every constraint is met by its pieces; as a whole word in the text only where the
    # untrained model does not go on with a piece that continues the word.
    assert all(r["usage_start"] == 100.0 for r in (rows[2], rows[4]))
    assert all(r["usage"] <= r["usage_start"] for r in rows[1:])
    table = io.StringIO()
    bench_glossary.print_table(rows, file=table)
    lines = table.getvalue().splitlines()
    assert lines[0].startswith("5 term pairs extracted, most frequent: Buch=buch, Haus=haus")
    assert lines[1].startswith("| set | glossary |") and len(lines) == 8
    assert lines[4].startswith("| terms | yes | 2 | 3 |") and "| 100.0 |" in lines[4]
