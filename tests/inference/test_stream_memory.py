"""A million lines through `tmt translate` in the memory of ten thousand (slow, minutes).

The peak resident memory of the translating process (its own `ru_maxrss`: exact, not
sampled) for a generated 1,000,000-line file stays within MEMORY_BOUND_MIB of a 10,000-line
one's, given as a file, or through a pipe with itself as --ref; and every output line is the
non-streaming translation of its input line (`Translator.translate` of the lines at once).
Holding every line would cost about 160 MiB at a million for a file, 72 MiB for a pipe and
3 GiB for --ref (docs/results.md, 2026-12-04): the bound catches each. Lines are one or two
of fourteen words, whose 210 distinct lines are translated once for the check.

`tmt score --nbest` reranks a list of NBEST_LARGE hypotheses within the same bound of its peak
for NBEST_SMALL: holding the list cost about 0.85 KiB a hypothesis (docs/results.md,
2026-12-05)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benches import import_bench
from tests.conftest import WORDS
from transformer_mt.inference.stream import format_translation
from transformer_mt.inference.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
SMALL, LARGE = 10_000, 1_000_000
NBEST_SMALL, NBEST_LARGE = 60_000, 300_000  # hypotheses, five a source
MEMORY_BOUND_MIB = 32
# Greedy and at most two output tokens: the untrained tiny model would otherwise write ten or
# more tokens a line, and the million lines take twice as long; memory does not care.
DECODE = {"beam_size": 1, "max_len_a": 0.0, "max_len_b": 2}
FLAGS = ["--beam-size", "1", "--max-len-a", "0", "--max-len-b", "2", "--quiet"]


def write_lines(path: Path, count: int) -> Path:
    rng = random.Random(count)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(count):
            f.write(" ".join(rng.choices(WORDS, k=rng.randint(1, 2))) + "\n")
    return path


def peak_rss_kib(
    monkeypatch: pytest.MonkeyPatch, command: list[str], source: Path, piped: bool
) -> int:
    """The peak resident memory of `command` itself (KiB, `bench_machine.own_peak_rss`: exact,
    not sampled, and not floored by this test process's own), which must succeed, reading
    `source` through a pipe (`piped`) or given nothing on stdin."""
    report = source.with_name(source.name + ".peak_kib")
    with open(os.devnull, "wb") as devnull:
        cat = subprocess.Popen(["cat", str(source)], stdout=subprocess.PIPE) if piped else None
        stdin = cat.stdout if cat is not None else subprocess.DEVNULL
        measured = import_bench(monkeypatch, "bench_machine").own_peak_rss(command, report)
        process = subprocess.Popen(measured, cwd=ROOT, stdin=stdin, stderr=devnull)
        if cat is not None:
            cat.stdout.close()
    assert process.wait() == 0, command
    if cat is not None:
        cat.wait()
    return int(report.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("piped", [False, True], ids=["file", "pipe-with-ref"])
def test_a_million_lines_stream_in_the_memory_of_ten_thousand(
    checkpoint, tmp_path, piped, monkeypatch
):
    translate = [sys.executable, "-m", "transformer_mt", "translate"]
    translate += ["--checkpoint", str(checkpoint), *FLAGS]
    peaks = {}
    for count in (SMALL, LARGE):
        source = write_lines(tmp_path / f"in{count}.txt", count)
        reads = ["--ref", str(source)] if piped else ["--input", str(source)]
        command = [*translate, *reads, "--output", str(tmp_path / f"out{count}.txt")]
        peaks[count] = peak_rss_kib(monkeypatch, command, source, piped)
    grown_mib = (peaks[LARGE] - peaks[SMALL]) / 1024
    assert grown_mib < MEMORY_BOUND_MIB, peaks

    translator = Translator.from_checkpoint(str(checkpoint), **DECODE)
    small = (tmp_path / f"in{SMALL}.txt").read_text(encoding="utf-8").splitlines()
    whole = [format_translation(t, i, 1) for i, t in enumerate(translator.translate(small))]
    assert (tmp_path / f"out{SMALL}.txt").read_text(encoding="utf-8").splitlines() == whole
    distinct = sorted({" ".join((a, b)) for a in WORDS for b in WORDS} | set(WORDS))
    expected = dict(
        zip(distinct, [t.texts[0] for t in translator.translate(distinct)], strict=True)
    )
    with (
        open(tmp_path / f"in{LARGE}.txt", encoding="utf-8") as inputs,
        open(tmp_path / f"out{LARGE}.txt", encoding="utf-8") as outputs,
    ):
        rows = 0
        for line, row in zip(inputs, outputs, strict=True):
            assert row[:-1] == expected[line[:-1]], (rows, line)
            rows += 1
    assert rows == LARGE


@pytest.mark.slow
def test_an_nbest_list_is_reranked_in_flat_memory(checkpoint, tmp_path, monkeypatch):
    score = [sys.executable, "-m", "transformer_mt", "score", "--checkpoint", str(checkpoint)]
    peaks = {}
    for count in (NBEST_SMALL, NBEST_LARGE):
        sources = write_lines(tmp_path / f"src{count}.txt", count // 5)
        texts = write_lines(tmp_path / f"hyp{count}.txt", count)
        nbest = tmp_path / f"nbest{count}.txt"
        with open(texts, encoding="utf-8") as lines, open(nbest, "w", encoding="utf-8") as f:
            for i, text in enumerate(lines):
                f.write(f"{i // 5} ||| {text[:-1]} ||| 0.0\n")
        out = tmp_path / f"out{count}.txt"
        command = [*score, "--src", str(sources), "--nbest", str(nbest), "--output", str(out)]
        peaks[count] = peak_rss_kib(monkeypatch, command, sources, piped=False)
        with open(out, encoding="utf-8") as written:
            assert sum(1 for _ in written) == count
    grown_mib = (peaks[NBEST_LARGE] - peaks[NBEST_SMALL]) / 1024
    assert grown_mib < MEMORY_BOUND_MIB, peaks
