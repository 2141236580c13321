"""What a batch shape the training update has not met before costs, and what the CUDA
allocator's settings change about it.

    python scripts/bench_shapes.py [--size quickstart] [--max-tokens 8192] [--pad-to-multiple 8]
        [--shapes 12] [--allocators default expandable reserve] [--device cuda] [--profile]

On a GPU the first epoch of a Multi30k run trained 7-10x slower than the later ones, which
meet the same batch shapes again (issue figures in configs/multi30k_de_en_gpu.yaml). This
script isolates that cost: it takes one batch of each of `--shapes` distinct (sentences,
source length, target length) shapes from an epoch of `bench_train`'s synthetic corpus, makes
one update on each (every shape new), then one on each again (every shape met before), and
times each update to the device's end. Per allocator setting, in a process of its own so
that the CUDA allocator starts empty:

    default     the caching allocator as torch configures it
    expandable  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments that grow in place
    reserve     one block of `--reserve-gib` taken and freed before the first update, which
                the allocator then splits for later requests instead of asking the driver

The CUDA rows also count the blocks the allocator asked the driver for in each pass
(`gpu_mallocs`, each a wait for the device). On a CPU only `default` runs: a new shape costs
nothing there but its own arithmetic, which is what the ratio should show. `--profile`
prints the first pass's and the second pass's heaviest operations by self CPU time (torch's
profiler): what the new shapes pay for.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_machine import pick_device, run_standalone  # noqa: E402
from train_workload import SIZES, build_updater, distinct_shapes, synthetic_corpus  # noqa: E402

from transformer_mt.data.batching import Batch  # noqa: E402
from transformer_mt.data.cursor import BatchIterator  # noqa: E402
from transformer_mt.machine import keep_freed_memory  # noqa: E402

ALLOCATORS = ["default", "expandable", "reserve"]
CORPUS_PAIRS = 29_000  # Multi30k's training set: as many shapes an epoch as a real run meets


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", choices=sorted(SIZES), default="quickstart")
    parser.add_argument("--max-tokens", type=int, default=8192, help="token budget per batch")
    parser.add_argument("--pad-to-multiple", type=int, default=8)
    parser.add_argument("--shapes", type=int, default=12, help="distinct batch shapes to time")
    parser.add_argument("--allocators", nargs="+", choices=ALLOCATORS, default=ALLOCATORS)
    parser.add_argument("--reserve-gib", type=float, default=8.0, help="the reserve setting's")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: auto")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--profile", action="store_true", help="the top operations of each pass")


def run(args: argparse.Namespace) -> list[dict]:
    """One result per allocator setting, each measured in a fresh process; a setting whose
    run fails is left out with one line on stderr."""
    allocators = args.allocators if pick_device(args.device).type == "cuda" else ["default"]
    context = multiprocessing.get_context("spawn")
    results = []
    for allocator in allocators:
        with context.Pool(1) as pool:
            try:
                result = pool.apply(_measure, (allocator, vars(args)))
            except Exception as error:  # noqa: BLE001 - any failure of one setting's run
                print(f"{allocator}: left out ({error!r})", file=sys.stderr, flush=True)
                continue
        print(json.dumps(result), file=sys.stderr, flush=True)
        results.append(result)
    return results


def _measure(allocator: str, options: dict) -> dict:
    """In a fresh process: the allocator set up, the model built, then the two passes."""
    if allocator == "expandable":  # read when CUDA first allocates, which is after this
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    args = SimpleNamespace(**options, compile=False)
    keep_freed_memory()  # as `tmt train` does
    device = pick_device(args.device)
    updater = build_updater("ours", args.size, args, device)
    corpus = synthetic_corpus(CORPUS_PAIRS, args.vocab_size)
    iterator = BatchIterator(corpus, args.max_tokens, seed=1, pad_to_multiple=args.pad_to_multiple)
    batches = distinct_shapes(iterator, args.shapes)
    if allocator == "reserve":
        torch.empty(int(args.reserve_gib * 2**30), dtype=torch.uint8, device=device)  # freed
    step = iter(range(1, 2 * len(batches) + 1))
    passes = {}
    for name in ("new", "repeated"):
        passes[name] = _timed_pass(updater, batches, step, args.profile and name)
    new, repeated = (float(np.median(passes[n]["seconds"])) for n in ("new", "repeated"))
    return {
        "benchmark": "shapes",
        "allocator": allocator,
        "device": str(device),
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "torch": torch.__version__,
        "size": args.size,
        "max_tokens": args.max_tokens,
        "pad_to_multiple": args.pad_to_multiple,
        "shapes": len(batches),
        "new_ms": round(1000 * new, 2),
        "repeated_ms": round(1000 * repeated, 2),
        "new_over_repeated": round(new / repeated, 2),
        "new_gpu_mallocs": passes["new"]["mallocs"],
        "repeated_gpu_mallocs": passes["repeated"]["mallocs"],
    }


def _timed_pass(updater, batches: list[Batch], steps, profile_label) -> dict:
    """One update on each batch, each timed to the device's end; the allocator's driver
    requests in the pass (None on a CPU); with `profile_label`, the pass's top operations."""
    device = updater.device
    mallocs_before = _driver_allocations(device)
    profiler = None
    if profile_label:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profiler = torch.profiler.profile(activities=activities)
        profiler.start()
    seconds = []
    for batch in batches:
        started = time.perf_counter()
        updater.update([batch], next(steps))  # reads its loss: the update has ended
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    if profiler is not None:
        profiler.stop()
        table = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
        print(
            f"== {profile_label} shapes: top operations by self CPU time\n{table}", file=sys.stderr
        )
    mallocs_after = _driver_allocations(device)
    mallocs = None if mallocs_before is None else mallocs_after - mallocs_before
    return {"seconds": seconds, "mallocs": mallocs}


def _driver_allocations(device: torch.device) -> int | None:
    """Blocks the CUDA caching allocator has asked the driver for so far."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.memory_stats(device).get("segment.all.allocated", 0))


def print_table(results: list[dict], file=sys.stdout) -> None:
    print(
        f"{'allocator':<12}{'shapes':>7}{'new ms':>9}{'again ms':>10}{'ratio':>7}"
        f"{'mallocs new':>13}{'again':>7}",
        file=file,
    )
    for r in results:
        mallocs = [r["new_gpu_mallocs"], r["repeated_gpu_mallocs"]]
        new, again = ("-" if m is None else str(m) for m in mallocs)
        print(
            f"{r['allocator']:<12}{r['shapes']:>7}{r['new_ms']:>9}{r['repeated_ms']:>10}"
            f"{r['new_over_repeated']:>7}{new:>13}{again:>7}",
            file=file,
        )
    if results:
        r = results[0]
        where = r["gpu"] or r["device"]
        print(
            f"{where}, torch {r['torch']}, {r['size']} size, {r['max_tokens']} tokens a batch, "
            f"padded to multiples of {r['pad_to_multiple']}",
            file=file,
        )


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
