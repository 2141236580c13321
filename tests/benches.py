"""What the tests of scripts/bench_*.py share: a benchmark module imported as
scripts/benchmark.py imports it, its command line parsed by its own `add_arguments`, and the
source and reference files of the benchmarks that translate."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def import_bench(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    """scripts/`name`.py, with scripts/ on the path for this test only."""
    monkeypatch.syspath_prepend(str(SCRIPTS))  # as benchmark.py imports its modules
    return importlib.import_module(name)


def bench_args(bench: ModuleType, argv: list[str]) -> argparse.Namespace:
    """`argv` parsed as `scripts/benchmark.py NAME` parses it, by the module's own arguments."""
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(argv)


def source_and_reference(folder: Path, sources: list[str]) -> list[str]:
    """`--src` and `--ref` of files in `folder`: `sources`, and as references the sources in
    capitals (a tiny model's translations score against them, neither 0 nor 100)."""
    (folder / "src").write_text("\n".join(sources) + "\n")
    (folder / "ref").write_text("\n".join(s.upper() for s in sources) + "\n")
    return ["--src", str(folder / "src"), "--ref", str(folder / "ref")]
