"""scripts/benchmark.py shapes: one batch of each distinct shape, in the order an epoch meets
them, each updated on twice (new, then met before), timed, in a process of its own."""

from __future__ import annotations

import io

import pytest

from tests.benches import bench_args, import_bench


@pytest.fixture
def bench_shapes(monkeypatch):
    return import_bench(monkeypatch, "bench_shapes")


def test_distinct_shapes_are_the_first_of_each_in_epoch_order(bench_shapes):
    from transformer_mt.data.cursor import BatchIterator

    corpus = bench_shapes.synthetic_corpus(2_000, 100)
    iterator = BatchIterator(corpus, 512, seed=1, pad_to_multiple=8)
    picked = bench_shapes.distinct_shapes(iterator, 5)

    def shape(batch):
        return (*batch.src_ids.shape, *batch.tgt_in_ids.shape)

    epoch = BatchIterator(corpus, 512, seed=1, pad_to_multiple=8)
    firsts = {}
    for _ in range(len(epoch.batch_indices(0))):
        batch = next(epoch)
        firsts.setdefault(shape(batch), batch.indices.tolist())
    assert len(firsts) > 5  # the epoch has more shapes than were asked for
    assert [shape(b) for b in picked] == list(firsts)[:5]
    assert [b.indices.tolist() for b in picked] == list(firsts.values())[:5]


@pytest.mark.slow  # a spawned process that loads torch and trains: about ten seconds
def test_row_and_table_on_the_cpu(bench_shapes):
    args = bench_args(bench_shapes, ["--max-tokens", "256", "--shapes", "3", "--device", "cpu"])
    (row,) = bench_shapes.run(args)  # the CUDA allocator settings are not run on a CPU
    assert row["allocator"] == "default" and row["shapes"] == 3
    assert row["new_ms"] > 0 and row["repeated_ms"] > 0
    assert row["new_gpu_mallocs"] is None
    table = io.StringIO()
    bench_shapes.print_table([row], file=table)
    assert "default           3" in table.getvalue()


@pytest.mark.slow  # a spawned process that loads torch: a few seconds
def test_a_setting_that_fails_is_left_out_in_one_line(bench_shapes, capsys):
    argv = ["--max-tokens", "256", "--shapes", "2", "--device", "cpu", "--vocab-size", "2"]
    assert bench_shapes.run(bench_args(bench_shapes, argv)) == []  # ids need a vocabulary > 4
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "left out" in line]
    assert line.startswith("default: left out (ValueError(")
