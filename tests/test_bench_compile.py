"""scripts/benchmark.py compile: ms per decoding step by variant, end to end on a tiny model."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import WORDS

REPO = Path(__file__).resolve().parents[1]
BENCH_ARGS = ["--sentences", "3", "--fixed-length", "3", "--beams", "1", "2", "--repeats", "2"]


@pytest.fixture
def sources(tmp_path):
    path = tmp_path / "test.de"
    path.write_text("\n".join(" ".join(WORDS[i : i + 4]) for i in range(4)) + "\n")
    return path


@pytest.fixture
def bench_compile(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))  # as benchmark.py imports its modules
    return importlib.import_module("bench_compile")


@pytest.mark.slow
def test_eager_variants_end_to_end(checkpoint, sources):
    command = [sys.executable, str(REPO / "scripts" / "benchmark.py"), "compile"]
    command += ["--checkpoint", str(checkpoint), "--input", str(sources), *BENCH_ARGS]
    command += ["--variants", "eager-packed", "eager-plain"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    machine, *rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert machine["bench"] == "machine"
    assert [(r["variant"], r["beam"]) for r in rows] == [
        ("eager-plain", 1),
        ("eager-plain", 2),
        ("eager-packed", 1),
        ("eager-packed", 2),
    ]
    for row in rows:
        assert row["bench"] == "compile" and row["sentences"] == 3 and row["fixed_length"] == 3
        assert 0 < row["min_ms"] <= row["median_ms"]
        assert row["compile_s"] >= 0 and row["graphs"] is None
        assert row["same_as_eager"] is True  # packed layers are plain nn.Linear's fast twin
    assert "eager-packed" in done.stderr and "fixed length 3" in done.stderr  # the table


def test_a_variant_that_fails_to_compile_is_a_row(bench_compile, checkpoint, sources, monkeypatch):
    def failing_compile(function, dynamic, options):
        def compiled(*args, **kwargs):
            raise RuntimeError("lowering failed\nthe rest of the message")

        return compiled

    monkeypatch.setattr(bench_compile.torch, "compile", failing_compile)
    parser = argparse.ArgumentParser()
    bench_compile.add_arguments(parser)
    args = parser.parse_args(
        ["--checkpoint", str(checkpoint), "--input", str(sources), *BENCH_ARGS]
        + ["--variants", "compiled", "eager-plain"]
    )
    rows = bench_compile.run(args)
    assert [(r["variant"], r["beam"]) for r in rows] == [
        ("eager-plain", 1),
        ("eager-plain", 2),
        ("compiled", None),
    ]
    assert rows[-1]["error"] == "RuntimeError: lowering failed"
