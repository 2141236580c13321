"""Benchmark training updates per minute by torch thread setting, idle and beside busy cores.

    python scripts/bench_threads.py [--config configs/multi30k_tiny.yaml] [--seconds 60] \
        [--loads 0 1] [--variants "OMP_NUM_THREADS=2" "OMP_NUM_THREADS=1" auto]

Each variant is a set of environment variables (or `auto`: none, so `train.threads` decides)
for one `tmt train` run of `--seconds` training time; each load is a number of busy-loop
processes (unpinned, not niced: what a user's other work looks like) running beside it. The
figure is updates / training minutes, read from the run's metrics. Needs the config's data
(`make data`). `scripts/benchmark.py threads` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled

from bench_machine import print_markdown_table, run_standalone  # noqa: E402

from transformer_mt.training.metrics import read_metrics  # noqa: E402

BUSY_LOOP = "while True: pass"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=str(REPO / "configs" / "multi30k_tiny.yaml"))
    parser.add_argument("--seconds", type=float, default=60.0, help="training time per run")
    parser.add_argument("--loads", type=int, nargs="+", default=[0, 1], help="busy processes")
    parser.add_argument(
        "--load-delay", type=float, default=0.0, help="start the busy processes this late (s)"
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["OMP_NUM_THREADS=2", "OMP_NUM_THREADS=1", "auto"],
        help="space-free comma lists of VAR=VALUE, or auto",
    )


def run(args: argparse.Namespace) -> list[dict]:
    results = []
    for load in args.loads:
        for variant in args.variants:
            results.append(_measure(args.config, args.seconds, load, variant, args.load_delay))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    return results


def _measure(config: str, seconds: float, load: int, variant: str, delay: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    if variant != "auto":
        env.update(item.split("=", 1) for item in variant.split(","))
    loads: list[subprocess.Popen] = []
    timer = threading.Timer(
        delay,
        lambda: loads.extend(
            subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(load)
        ),
    )
    timer.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            overrides = [
                f"train.max_minutes={seconds / 60}",
                "train.valid_every=1000000",
                "train.valid_max_sentences=8",
                "train.keep_last=0",
                "train.log_every=1",  # a row per update: the last one has the count and time
            ]
            command = [sys.executable, "-m", "transformer_mt", "train", "--config", config,
                       "--run-dir", f"{tmp}/run", "--set", *overrides]  # fmt: skip
            done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{variant}: training failed:\n{done.stderr[-2000:]}")
            rows = read_metrics(f"{tmp}/run/metrics.jsonl")
    finally:
        timer.cancel()
        timer.join()
        for p in loads:
            p.kill()
            p.wait()
    train_rows = [r for r in rows if r["kind"] == "train"]
    last = train_rows[-1]
    # "threads N: reason" at start, and again each time the count follows the load.
    threads = re.findall(r"INFO \S+: threads (\d+): (.*)", done.stderr)
    return {
        "bench": "threads",
        "variant": variant,
        "busy_processes": load,
        "load_delay_s": delay,
        "updates": last["step"],
        "train_minutes": round(last["elapsed"] / 60, 3),
        "updates_per_minute": round(last["step"] / (last["elapsed"] / 60), 1),
        "threads": "→".join(n for n, _ in threads),
        "threads_reason": threads[0][1] if threads else "",
    }


def print_table(results: list[dict], file=sys.stderr) -> None:
    headers = ["busy processes", "from (s)", "variant", "threads chosen", "updates/min"]
    rows = [
        [r["busy_processes"], f"{r['load_delay_s']:g}", r["variant"], r["threads"],
         r["updates_per_minute"]]
        for r in results
    ]  # fmt: skip
    print_markdown_table(headers, "rrllr", rows, file)


if __name__ == "__main__":
    run_standalone(__doc__, add_arguments, run, print_table)
