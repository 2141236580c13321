"""scripts/benchmark.py train: a system whose run fails is left out with one line, and the
others keep their rows (on a CPU, ours-graphs cannot start: CUDA graphs need CUDA)."""

from __future__ import annotations

import pytest

from tests.benches import bench_args, import_bench


@pytest.mark.slow  # two spawned processes that load torch and train: about ten seconds
def test_a_failing_system_costs_the_others_nothing(monkeypatch, capsys):
    bench_train = import_bench(monkeypatch, "bench_train")
    argv = ["--sizes", "quickstart", "--systems", "ours", "ours-graphs", "--steps", "2"]
    argv += ["--warmup", "1", "--max-tokens", "256", "--pad-to-multiple", "8", "--warm-shapes"]
    args = bench_args(bench_train, [*argv, "--device", "cpu", "--peak-gflops", "1"])
    rows = bench_train.run(args)
    assert [row["system"] for row in rows] == ["ours"]
    assert rows[0]["tgt_tokens_per_s"] > 0 and rows[0]["steps"] == 2
    left_out = [line for line in capsys.readouterr().err.splitlines() if "left out" in line]
    assert len(left_out) == 1 and left_out[0].startswith("ours-graphs at quickstart: left out")
    assert "train.cuda_graphs needs one process on a CUDA device" in left_out[0]
