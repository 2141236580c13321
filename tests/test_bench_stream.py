"""scripts/benchmark.py stream --translate-lines: a row per size and input (a file, a pipe, a
file scored against itself), each with the peak memory of its own process, on the tiny
checkpoint."""

from __future__ import annotations

import io

import pytest

from tests.benches import bench_args, import_bench


@pytest.fixture
def bench_stream(monkeypatch):
    return import_bench(monkeypatch, "bench_stream")


@pytest.mark.slow  # three processes that each load torch: about ten seconds
def test_rows_and_table(bench_stream, checkpoint):
    args = bench_args(
        bench_stream,
        ["--translate-lines", "30", "--checkpoint", str(checkpoint)]
        + ["--inputs", "file", "pipe", "ref"],
    )
    rows = bench_stream.run(args)
    assert [(row["lines"], row["input"]) for row in rows] == [
        (30, "file"),
        (30, "pipe"),
        (30, "ref"),
    ]
    assert all(row["peak_rss_mib"] > 0 and row["lines_per_s"] > 0 for row in rows)
    assert [len(row["scores"]) for row in rows] == [0, 0, 2]
    assert rows[2]["scores"][0].startswith("BLEU|")
    table = io.StringIO()
    bench_stream.print_table(rows, file=table)
    assert "| 30 | pipe |" in table.getvalue()


def test_no_corpora_and_no_lines_is_refused(bench_stream):
    with pytest.raises(SystemExit, match="give --corpora"):
        bench_stream.run(bench_args(bench_stream, []))
    with pytest.raises(SystemExit, match="needs --checkpoint"):
        bench_stream.run(bench_args(bench_stream, ["--translate-lines", "10"]))
