"""Benchmark streaming by size: training on a corpus (`data.streaming`), `tmt translate` of a file.

    tmt data wmt14_standin --pairs 100000 --out data/standin_100k
    tmt data wmt14_standin --pairs 2000000 --out data/standin_2m
    python scripts/bench_stream.py --corpora data/standin_100k/train data/standin_2m/train \
        [--config configs/multi30k_de_en.yaml] [--steps 200] [--sample 50000] [--workers 1]
    python scripts/bench_stream.py --translate-lines 10000 1000000 --checkpoint CKPT \
        [--inputs file pipe ref] [--source FILE] [--decode-flags="--beam-size 1"] [--package DIR]

For each corpus (a text-format prefix, `{prefix}.{src_lang}` and `.{tgt_lang}`) two `tmt train`
runs of `--steps` updates: the first trains the tokenizer on a `--sample` of the corpus, the
second finds it in the cache, as a resumed or repeated run does. Measured from outside: the
peak resident memory of the training process and its data-loader workers together (summed
proportional set size, PSS, sampled every 50 ms), and the seconds from launch to the end of
the first update (its metrics row); from the run's metrics: how much of the training time
updates waited for batches (`data_wait`, after the first update, whose wait is the pipeline's
start) and tokens/s. A streamed run should use the same memory for any corpus size and start
in about the same time.

With --translate-lines, `tmt translate` of inputs of each size (the lines of --source cycled,
or short lines of a few German words, which the tiny test model of tests/conftest.py knows),
given as `--input FILE` (`file`), through a pipe from `cat` (`pipe`), or as a file with itself
as `--ref` (`ref`: scored as it streams). Measured: the exact peak resident memory of the
translating process (its own `ru_maxrss`: `bench_machine.own_peak_rss`), seconds and lines per
second; the output must have a line per input line. Memory should be the same for any number of
lines. --package names the folder whose `transformer_mt` translates (another checkout, to
compare two).
`scripts/benchmark.py stream` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled

from bench_machine import own_peak_rss, print_markdown_table, run_standalone  # noqa: E402

from transformer_mt.config import load_config  # noqa: E402
from transformer_mt.data.corpus_files import count_file_lines  # noqa: E402
from transformer_mt.training.metrics import read_metrics  # noqa: E402

SAMPLE_SECONDS = 0.05
# Short lines of words the tiny test model's tokenizer was trained on (tests/conftest.py).
WORDS = ["ein", "mann", "fährt", "rad", "zwei", "hunde", "spielen", "im", "schnee", "eine",
         "frau", "liest", "das", "buch"]  # fmt: skip
INPUTS = ("file", "pipe", "ref")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpora", nargs="+", help="training: text-format path prefixes")
    parser.add_argument("--config", default=str(REPO / "configs" / "multi30k_de_en.yaml"))
    parser.add_argument("--steps", type=int, default=200, help="updates per run")
    parser.add_argument(
        "--sample", type=int, default=50_000, help="tokenizer.input_sentence_size (pairs)"
    )
    parser.add_argument("--workers", type=int, default=1, help="data.workers")
    parser.add_argument("--threads", type=int, default=1, help="train.threads")
    parser.add_argument(
        "--translate-lines", type=int, nargs="+", help="translation: input sizes, in lines"
    )
    parser.add_argument("--checkpoint", help="translation: the model")
    parser.add_argument("--inputs", nargs="+", choices=INPUTS, default=["file"])
    parser.add_argument("--source", help="translation: lines to cycle (default: WORDS)")
    parser.add_argument(
        "--decode-flags", default="--beam-size 1", help="translation: more flags, one string"
    )
    parser.add_argument("--package", default=str(REPO), help="translation: the checkout to run")


def run(args: argparse.Namespace) -> list[dict]:
    if args.translate_lines:
        if args.checkpoint is None:
            raise SystemExit("--translate-lines needs --checkpoint")
        return _run_translate(args)
    if not args.corpora:
        raise SystemExit("give --corpora (training) or --translate-lines (translation)")
    results = []
    for corpus in args.corpora:
        with tempfile.TemporaryDirectory() as tmp:
            for tokenizer in ("trained", "cached"):
                results.append(_measure(args, corpus, Path(tmp), tokenizer))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    return results


def _measure(args: argparse.Namespace, corpus: str, tmp: Path, tokenizer: str) -> dict:
    run_dir = tmp / f"run-{tokenizer}"
    overrides = [
        "data.streaming=true",
        f"data.train={corpus}",
        f"data.workers={args.workers}",
        f"data.cache_dir={tmp / 'cache'}",  # shared by the two runs: the second finds the sample
        f"tokenizer.input_sentence_size={args.sample}",
        f"train.max_steps={args.steps}",
        "train.max_minutes=null",
        f"train.warmup_steps={args.steps // 2}",  # any, below max_steps: speed does not care
        f"train.valid_every={args.steps}",
        "train.valid_max_sentences=8",
        "train.valid_bleu=false",
        "train.keep_last=0",
        "train.log_every=1",  # a metrics row per update: the first marks the start
        f"train.threads={args.threads}",
    ]
    command = [sys.executable, "-m", "transformer_mt", "train", "--config", args.config,
               "--run-dir", str(run_dir), "--set", *overrides]  # fmt: skip
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE, text=True)
    peak = _PeakMemory(process.pid)
    first_update = _first_row_seconds(run_dir / "metrics.jsonl", process, started)
    _, err = process.communicate()
    peak.stop()
    if process.returncode != 0:
        raise SystemExit(f"{corpus}: training failed:\n{err[-2000:]}")
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]
    later = [r["data_wait"] for r in rows[1:]]
    lang = load_config(args.config).data.src_lang
    return {
        "bench": "stream",
        "corpus": corpus,
        "pairs": count_file_lines(Path(f"{corpus}.{lang}")),
        "tokenizer": tokenizer,
        "workers": args.workers,
        "first_update_s": round(first_update, 2),
        "peak_pss_mb": round(peak.peak / 2**20, 1),
        "data_wait_pct": round(100 * statistics.mean(later), 2),
        "data_wait_max_pct": round(100 * max(later), 2),
        "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in rows[1:])),
        "updates": rows[-1]["step"],
    }


def _run_translate(args: argparse.Namespace) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for lines in args.translate_lines:
            source = Path(tmp) / f"in{lines}.txt"
            _write_input(source, lines, args.source)
            for how in args.inputs:
                results.append(_measure_translate(args, source, lines, how))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
            source.unlink()
    return results


def _write_input(path: Path, lines: int, source: str | None) -> None:
    """`lines` lines: those of `source` cycled, or one or two of WORDS (seeded)."""
    if source is not None:
        pool = Path(source).read_text(encoding="utf-8").splitlines()
    else:
        rng = random.Random(0)
        pool = [" ".join(rng.choices(WORDS, k=rng.randint(1, 2))) for _ in range(10_000)]
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in itertools.islice(itertools.cycle(pool), lines))


def _measure_translate(args: argparse.Namespace, source: Path, lines: int, how: str) -> dict:
    out = source.with_name("out.txt")
    command = [sys.executable, "-m", "transformer_mt", "translate", "--checkpoint",
               os.path.abspath(args.checkpoint), "--quiet", "--output", str(out),
               *args.decode_flags.split()]  # fmt: skip
    if how != "pipe":
        command += ["--input", str(source)]
    if how == "ref":
        command += ["--ref", str(source)]
    started = time.perf_counter()
    cat = subprocess.Popen(["cat", str(source)], stdout=subprocess.PIPE) if how == "pipe" else None
    with tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as folder:
        stdin = subprocess.DEVNULL if cat is None else cat.stdout
        report = Path(folder) / "peak_kib"
        measured = own_peak_rss(command, report)
        process = subprocess.Popen(measured, cwd=args.package, stdin=stdin, stderr=err)
        if cat is not None:
            cat.stdout.close()  # ours: `cat` sees the pipe close if the translation stops
        process.wait()
        seconds = time.perf_counter() - started
        if cat is not None:
            cat.wait()
        err.seek(0)
        said = err.read().decode(errors="replace")
        peak_kib = int(report.read_text()) if report.exists() else 0
    if process.returncode != 0:
        raise SystemExit(f"{how}, {lines} lines: translate failed:\n{said[-2000:]}")
    written = count_file_lines(out)
    if written != lines:
        raise SystemExit(f"{how}: {written} output lines for {lines} input lines")
    out.unlink()
    return {
        "bench": "stream_translate",
        "lines": lines,
        "input": how,
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "seconds": round(seconds, 1),
        "lines_per_s": round(lines / seconds),
        "scores": [line for line in said.splitlines() if line.startswith(("BLEU", "chrF"))],
    }


class _PeakMemory:
    """The largest summed PSS of a process and its descendants, sampled in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._done.wait(SAMPLE_SECONDS):
            self.peak = max(self.peak, sum(_pss(pid) for pid in _tree(self.pid)))


def _tree(root: int) -> list[int]:
    """`root` and every process below it, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone since the listing
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # after the command name, which may
        children.setdefault(parent, []).append(int(entry.name))  # hold spaces and parentheses
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _pss(pid: int) -> int:
    """Proportional resident bytes of `pid` (a page shared by n processes counts 1/n in each,
    so forked workers are not counted twice); 0 once it has gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _first_row_seconds(metrics: Path, process: subprocess.Popen, started: float) -> float:
    """Seconds from `started` until `metrics` holds a train row (the first update's)."""
    while process.poll() is None:
        if metrics.is_file() and '"train"' in metrics.read_text():
            return time.perf_counter() - started
        time.sleep(SAMPLE_SECONDS)
    return float("nan")


def print_table(results: list[dict], file=sys.stderr) -> None:
    if results and results[0]["bench"] == "stream_translate":
        headers = ["lines", "input", "peak RSS (MiB)", "seconds", "lines/s"]
        rows = [
            [f"{r['lines']:,}", r["input"], r["peak_rss_mib"], r["seconds"],
             f"{r['lines_per_s']:,}"]
            for r in results
        ]  # fmt: skip
        print_markdown_table(headers, "rlrrr", rows, file)
        return
    headers = ["pairs", "tokenizer", "first update (s)", "peak memory, PSS (MB)",
               "waiting for data (mean / max of updates)", "tokens/s"]  # fmt: skip
    rows = [
        [f"{r['pairs']:,}", r["tokenizer"], r["first_update_s"], r["peak_pss_mb"],
         f"{r['data_wait_pct']}% / {r['data_wait_max_pct']}%", f"{r['tokens_per_s']:,}"]
        for r in results
    ]  # fmt: skip
    print_markdown_table(headers, "rlrrrr", rows, file)


if __name__ == "__main__":
    run_standalone(__doc__, add_arguments, run, print_table)
