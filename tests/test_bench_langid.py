"""scripts/benchmark.py langid: accuracy and confusion arithmetic on a stub identifier."""

from __future__ import annotations

import io

import pytest

from tests.benches import bench_args, import_bench

# A stub identifier: the label is the line's first word, "none" gives no answer.
LINES = {
    "en": ["en a man", "de a dog on a long red road", "en two dogs run on the grass", "none x"],
    "de": ["de ein Hund", "de ein Mann auf einem roten Fahrrad", "en Hund"],
}


def stub_identify(text: str) -> str | None:
    label = text.split()[0]
    return None if label == "none" else label


@pytest.fixture
def bench_langid(monkeypatch):
    return import_bench(monkeypatch, "bench_langid")


def test_accuracy_confusion_and_short_lines(bench_langid):
    rows = bench_langid.measure(stub_identify, LINES, short_words=3, repeats=2)
    assert [row["lang"] for row in rows] == ["en", "de", "all"]
    en, de, pooled = rows
    # en: right on lines 1 and 3; "de" on the long line 2, no answer on the short line 4.
    assert (en["lines"], en["correct"], en["accuracy"]) == (4, 2, 0.5)
    assert (en["short_lines"], en["short_correct"], en["short_accuracy"]) == (2, 1, 0.5)
    assert (en["long_lines"], en["long_correct"], en["long_accuracy"]) == (2, 1, 0.5)
    assert en["confusion"] == {"de": 1, "?": 1}
    # de: both short lines have 3 words; one of them is labelled "en".
    assert (de["lines"], de["correct"], de["accuracy"]) == (3, 2, 0.6667)
    assert (de["short_lines"], de["short_correct"], de["short_accuracy"]) == (2, 1, 0.5)
    assert (de["long_lines"], de["long_correct"], de["long_accuracy"]) == (1, 1, 1.0)
    assert de["confusion"] == {"en": 1}
    assert (pooled["lines"], pooled["correct"], pooled["accuracy"]) == (7, 4, 0.5714)
    assert (pooled["short_lines"], pooled["short_correct"]) == (4, 2)
    assert pooled["confusion"] == {"de": 1, "?": 1, "en": 1}
    for row in rows:
        assert row["ms_per_line"] >= 0 and row["short_words"] == 3


def test_no_short_lines_leaves_their_accuracy_empty(bench_langid):
    (row, _) = bench_langid.measure(stub_identify, {"de": LINES["de"]}, short_words=0, repeats=1)
    assert (row["short_lines"], row["short_accuracy"], row["long_accuracy"]) == (0, None, 0.6667)


def test_rows_and_table_with_a_missing_identifier(bench_langid, tmp_path, monkeypatch):
    for lang, lines in LINES.items():
        (tmp_path / f"test2016.{lang}").write_text("\n".join(lines) + "\n")

    def build(langs):
        assert langs == ["en", "de"]  # a restricted identifier gets the benchmark's languages
        return stub_identify, len(langs)

    Identifier = bench_langid.Identifier
    monkeypatch.setitem(bench_langid.IDENTIFIERS, "stub", Identifier("json", "pytest", build, True))
    missing = Identifier("no_such_identifier_module", "no-such-identifier", build, True)
    monkeypatch.setitem(bench_langid.IDENTIFIERS, "missing", missing)
    args = bench_args(
        bench_langid,
        ["--data", str(tmp_path), "--langs", "en", "de", "--short-words", "3", "--repeats", "1"]
        + ["--identifiers", "missing", "stub"],
    )
    rows = bench_langid.run(args)
    assert rows[0] == {
        "bench": "langid",
        "identifier": "missing",
        "skipped": "not installed (pip install no-such-identifier)",
    }
    assert [(row["identifier"], row["split"], row["lang"]) for row in rows[1:]] == [
        ("stub", "test2016", "en"),
        ("stub", "test2016", "de"),
        ("stub", "test2016", "all"),
    ]
    for row in rows[1:]:
        assert row["bench"] == "langid" and row["languages"] == 2
        assert row["package"].startswith("pytest ") and row["install_mb"] > 0
        assert row["load_s"] >= 0 and row["cpus"] >= 1
    table = io.StringIO()
    bench_langid.print_table(rows, file=table)
    text = table.getvalue()
    assert "| stub | 2 | test2016 | 57.1 | 50.0 (2/4) | 66.7 |" in text
    assert "| stub | test2016 | en | 50.0 | 50.0 (1/2) | 50.0 | de 1, ? 1 |" in text
    assert "missing: skipped, not installed (pip install no-such-identifier)" in text
