"""`tmt evaluate` of large files in flat memory (slow: about a minute).

The peak resident memory of `tmt evaluate` (its own `ru_maxrss`: exact, not sampled) for
200,000 distinct lines stays within MEMORY_BOUND_MIB of its peak for 70,000. Both sizes fill
sacreBLEU's tokenizer caches (an `lru_cache` of 2**16 lines each), which account for the ~40
MiB between ten thousand lines and a million; past them the files' length costs nothing.
Holding the files for `corpus_score` cost about 16 KiB a line (16 GiB at a million, 2 GiB
between these two sizes: docs/results.md, 2026-12-05)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benches import import_bench
from tests.conftest import WORDS

ROOT = Path(__file__).resolve().parents[1]
SMALL, LARGE = 70_000, 200_000
MEMORY_BOUND_MIB = 32


def write_pair(folder: Path, count: int) -> tuple[Path, Path]:
    """`count` distinct references of twelve words, and hypotheses with one word changed."""
    rng = random.Random(count)
    hyp, ref = folder / f"hyp{count}.txt", folder / f"ref{count}.txt"
    with open(hyp, "w", encoding="utf-8") as h, open(ref, "w", encoding="utf-8") as r:
        for _ in range(count):
            words = rng.choices(WORDS, k=12)
            r.write(" ".join(words) + "\n")
            words[rng.randrange(12)] = rng.choice(WORDS)
            h.write(" ".join(words) + "\n")
    return hyp, ref


@pytest.mark.slow
def test_large_files_are_scored_in_flat_memory(tmp_path, monkeypatch):
    own_peak_rss = import_bench(monkeypatch, "bench_machine").own_peak_rss
    peaks = {}
    for count in (SMALL, LARGE):
        hyp, ref = write_pair(tmp_path, count)
        command = [sys.executable, "-m", "transformer_mt", "evaluate", "--hyp", str(hyp)]
        report = tmp_path / f"peak{count}"
        measured = own_peak_rss([*command, "--ref", str(ref)], report)
        done = subprocess.run(measured, cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("BLEU|") and "chrF2|" in done.stdout
        peaks[count] = int(report.read_text())  # KiB
    grown_mib = (peaks[LARGE] - peaks[SMALL]) / 1024
    assert grown_mib < MEMORY_BOUND_MIB, peaks
