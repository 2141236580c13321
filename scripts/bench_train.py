"""Benchmark training: target tokens/s, step time, peak memory and model FLOPs utilisation, for
our model and for Hugging Face `MarianMTModel` of identical dimensions on identical batches.

    python scripts/bench_train.py [--sizes quickstart base] [--systems ours hf hf-eager] [--steps 5]
        [--max-tokens 4096] [--pad-to-multiple 8] [--peak-gflops G]

Synthetic batches with a Multi30k-like length distribution (about 15 subword tokens a sentence)
go through the update `tmt train` makes (`training.update.Updater`: forward, label-smoothed
loss, backward, clip, AdamW), every system the same batches (`--pad-to-multiple`: lengths
padded as `train.pad_to_multiple` pads them). The `hf` system is our model, built with the
same seed, converted by `to_marian` and called through our model's signature, so batches,
optimizer, schedule and autocast are the same code; the network differs, and so does the
loss: ours is `fused_label_smoothed_loss`, the hf system's is transformers' own `LabelSmoother`,
what a Hugging Face training loop computes.
`hf-eager` is the same with transformers' eager (plain-math) attention instead of SDPA.
Each (system, size) runs in a fresh process so its peak memory (ru_maxrss on CPU, the CUDA
allocator's peak on GPU) is its own; on CPU the hf figure also holds the transformers import
and the model it was converted from. The systems of a size take their timed updates in turns.

MFU divides the model's matmul FLOPs per second (`training_flops`) by a peak: `--peak-gflops`,
else bench_matmul's product at its largest Transformer shape in the training precision,
measured in this run (CPU only: on CUDA, MFU needs `--peak-gflops`). Prints one JSON object per
run, then a table. `scripts/benchmark.py train` calls `add_arguments`, `run` and `print_table`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import multiprocessing
import platform
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled
sys.path.insert(0, str(REPO / "scripts"))  # bench_matmul, also when imported from elsewhere

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_machine import pick_device, run_standalone  # noqa: E402
from bench_matmul import SHAPES as MATMUL_SHAPES  # noqa: E402
from bench_matmul import measure as measure_matmul  # noqa: E402
from train_workload import (  # noqa: E402
    HF_ATTENTION,
    MULTI30K_PAIRS,
    SIZES,
    SYSTEMS,
    MarianForUpdater,
    build_updater,
    distinct_shapes,
    synthetic_corpus,
    upcoming_pair_lengths,
)

from transformer_mt.config import ModelConfig  # noqa: E402
from transformer_mt.data.cursor import BatchIterator  # noqa: E402
from transformer_mt.machine import keep_freed_memory  # noqa: E402
from transformer_mt.training.execution import resolve_precision  # noqa: E402
from transformer_mt.training.update import Updater  # noqa: E402

PEAK_REPEATS = 5  # bench_matmul's default: the best of 5 is little disturbed by other processes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=list(SIZES))
    parser.add_argument(
        "--systems",
        nargs="+",
        choices=SYSTEMS,
        default=["ours", "hf"],
        help="hf, hf-eager: transformers' MarianMTModel with SDPA or eager attention (skipped "
        "when transformers is not installed)",
    )
    parser.add_argument("--steps", type=int, default=5, help="timed updates per run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed updates first")
    parser.add_argument(
        "--warm-shapes",
        action="store_true",
        help="before the warmup, one untimed update on each batch shape of an epoch, so that "
        "the timed updates meet none for the first time (what a new one costs: bench_shapes)",
    )
    parser.add_argument("--max-tokens", type=int, default=4096, help="token budget per batch")
    parser.add_argument(
        "--pad-to-multiple", type=int, default=1, help="train.pad_to_multiple of the batches"
    )
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: auto")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--compile", action="store_true", help="train.compile: torch.compile the step (warmup)"
    )
    parser.add_argument(
        "--peak-gflops",
        type=float,
        default=None,
        help="MFU denominator (default: measured with bench_matmul; CPU only)",
    )


def run(args: argparse.Namespace) -> list[dict]:
    """One result dict per (size, system), each system in a process of its own, the systems'
    timed updates in turns."""
    systems = _available(args.systems)
    peak = _peak(args)
    results = []
    for size in args.sizes:
        for result in _measure_in_turns(systems, size, vars(args)):
            result = {**result, **_utilisation(result, peak)}
            print(json.dumps(result), file=sys.stderr, flush=True)  # progress
            results.append(result)
    return results


def _available(systems: list[str]) -> list[str]:
    """The requested systems, less the hf ones (with a note) when transformers is not installed."""
    if set(systems) & set(HF_ATTENTION) and importlib.util.find_spec("transformers") is None:
        print("transformers is not installed: skipping the hf systems", file=sys.stderr)
        return [s for s in systems if s not in HF_ATTENTION]
    return list(systems)


def _spawned(function: Callable[..., dict], *args: Any) -> dict:
    """`function(*args)` in a fresh process: its own peak memory, no state left by earlier runs."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


def _measure_in_turns(systems: list[str], size: str, options: dict) -> list[dict]:
    """Each system's run (`_start_run` .. `_finish_run`) in a fresh process of its own (its own
    peak memory, no state left by earlier runs), the timed updates taken in turns: one update
    of each system, then the next round, so that a machine slowing down for a while (a VM's
    neighbours: 10-15% on the 2-core VMs here) slows every system alike. A system whose run
    fails is left out with one line on stderr, so that it costs the others none of their rows.
    """
    context = multiprocessing.get_context("spawn")
    pools = {system: context.Pool(1) for system in systems}

    def each(call: Callable[..., Any], args_of: Callable[[str], tuple] = lambda _: ()) -> dict:
        """`call(*args_of(system))` in each remaining system's process; a failing one is dropped."""
        results = {}
        for system, pool in list(pools.items()):
            try:
                results[system] = pool.apply(call, args_of(system))
            except Exception as error:  # noqa: BLE001 - any failure of one system's run
                print(f"{system} at {size}: left out ({error!r})", file=sys.stderr, flush=True)
                pools.pop(system).terminate()
        return results

    try:
        each(_start_run, lambda system: (system, size, options))
        for _ in range(options["steps"]):
            each(_timed_update)
        return list(each(_finish_run).values())
    finally:
        for pool in pools.values():
            pool.terminate()


@dataclass
class _Run:
    """One system's run in its worker process, from `_start_run` to `_finish_run`."""

    system: str
    size: str
    args: SimpleNamespace
    updater: Updater
    batches: BatchIterator
    src_lens: np.ndarray  # of the batches to time, read ahead for their model FLOPs
    tgt_lens: np.ndarray
    step: int  # the next update's step number
    tokens: float = 0.0  # target tokens of the timed updates so far
    times: list[float] = field(default_factory=list)  # their wall-clock seconds


_RUN: list[_Run] = []  # this worker process's run (one)


def _start_run(system: str, size: str, options: dict) -> None:
    """Build `system` at `size` and make its `warmup` untimed updates; read ahead the lengths
    of the batches to time, for their model FLOPs."""
    args = SimpleNamespace(**options)
    _set_threads(args.threads)
    keep_freed_memory()  # as `tmt train` does; every system's process alike
    device = pick_device(args.device)
    updater = build_updater(system, size, args, device)
    corpus = synthetic_corpus(MULTI30K_PAIRS, args.vocab_size)
    batches = BatchIterator(corpus, args.max_tokens, seed=1, pad_to_multiple=args.pad_to_multiple)
    update_freq = updater.cfg.update_freq
    warm = []
    if args.warm_shapes:
        epoch = BatchIterator(corpus, args.max_tokens, seed=1, pad_to_multiple=args.pad_to_multiple)
        warm = [[batch] for batch in distinct_shapes(epoch)]
    warm += [[next(batches) for _ in range(update_freq)] for _ in range(args.warmup)]
    for step, group in enumerate(warm, start=1):
        updater.update(group, step)
    src_lens, tgt_lens = upcoming_pair_lengths(batches, args.steps * update_freq)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    _RUN[:] = [_Run(system, size, args, updater, batches, src_lens, tgt_lens, len(warm) + 1)]


def _timed_update() -> None:
    """One timed update of this process's run."""
    run = _RUN[0]
    updater = run.updater
    start = time.perf_counter()
    result = updater.update([next(run.batches) for _ in range(updater.cfg.update_freq)], run.step)
    if updater.device.type == "cuda":
        torch.cuda.synchronize()
    run.times.append(time.perf_counter() - start)
    run.tokens += result.tokens if result.applied else 0.0
    run.step += 1


def _finish_run() -> dict:
    """Target tokens/s, step time, peak memory and model FLOPs of this process's timed updates."""
    run = _RUN[0]
    updater, args, times = run.updater, run.args, run.times
    if run.tokens != run.tgt_lens.sum():  # the FLOPs must describe the batches just timed
        raise RuntimeError(f"counted {run.tgt_lens.sum()} target tokens, trained {run.tokens}")
    flops = training_flops(SIZES[run.size], args.vocab_size, run.src_lens, run.tgt_lens)
    params = sum(p.numel() for p in updater.model.parameters() if p.requires_grad)
    return {
        "benchmark": "train",
        "system": run.system,
        "size": run.size,
        "params_m": round(params / 1e6, 2),
        **_run_info(updater, args),
        "tgt_tokens_per_s": round(run.tokens / sum(times), 1),
        "step_time_s": round(float(np.median(times)), 4),
        "peak_memory_mib": round(_peak_memory_mib(updater.device), 1),
        "model_gflops_per_update": round(flops / args.steps / 1e9, 2),
        "model_gflops_per_s": round(flops / sum(times) / 1e9, 2),
    }


def _set_threads(threads: int | None) -> None:
    if threads:
        torch.set_num_threads(threads)


# --- the peak and the utilisation ---------------------------------------------------------


def _peak(args: argparse.Namespace) -> dict:
    """The MFU denominator as {"peak_gflops": G or None, "peak_source": where G came from}."""
    if args.peak_gflops is not None:
        return {"peak_gflops": args.peak_gflops, "peak_source": "--peak-gflops"}
    device = pick_device(args.device)
    if device.type != "cpu":
        print("no --peak-gflops: MFU left out (bench_matmul measures the CPU)", file=sys.stderr)
        return {"peak_gflops": None, "peak_source": None}
    dtype_name = "fp32" if resolve_precision(args.precision, device) is None else "bf16"
    row = _spawned(_measure_peak, dtype_name, args.threads)
    return {
        "peak_gflops": row["gflops"],
        "peak_source": f"bench_matmul {dtype_name} {row['shape']}",
    }


def _measure_peak(dtype_name: str, threads: int | None) -> dict:
    """bench_matmul's largest product, under the thread count the training runs use."""
    _set_threads(threads)
    return measure_matmul(dtype_name, max(MATMUL_SHAPES, key=math.prod), PEAK_REPEATS)


def _utilisation(result: dict, peak: dict) -> dict:
    gflops = peak["peak_gflops"]
    mfu = None if gflops is None else round(result["model_gflops_per_s"] / gflops, 4)
    return {**peak, "mfu": mfu}


def training_flops(
    cfg: ModelConfig, vocab_size: int, src_lens: np.ndarray, tgt_lens: np.ndarray
) -> int:
    """Matmul FLOPs of forward + backward over sentence pairs of these lengths.

    s and t are a pair's lengths as the model reads them (source + EOS, BOS + target); padding
    is not counted, since it is the batcher's waste, not work the model needs. With D d_model,
    F d_ff, K the key/value width (D unless grouped-query attention), V the target vocabulary
    and m = 2 feed-forward matrices (3 for swiglu, whose fc1 is twice as wide), a forward pass
    costs these multiply-adds per pair:

        encoder layer   s (2 D^2 + 2 D K)   query and output; key and value projections
                        2 s^2 D             scores Q K^T, then weights @ V (all heads: width D)
                        s m D F             the feed-forward network
        decoder layer   t (2 D^2 + 2 D K) + 2 t^2 D + t m D F, as above for self-attention;
                        the whole t x t square counts although causality masks half of it,
                        as in PaLM's MFU (Chowdhery et al. 2022, appendix B)
                        2 t D^2 + 2 s D K   cross-attention: query and output projections of
                                            the target, key and value projections of the memory
                        2 t s D             cross-attention scores and weights @ V
        output          t D V               the logits projection (tied weights still multiply)

    A multiply-add is 2 FLOPs. Backward costs twice the forward (each product is taken once
    for its input's gradient, once for its weight's), so training is 3 x forward: the "6N per
    token" rule of Kaplan et al. (2020) plus attention. Embedding lookups, softmax, norms,
    activations and the loss are left out: they are not matmuls, and the peak that MFU divides
    by is a matmul peak. Checked: equals `torch.utils.flop_counter.FlopCounterMode` on one
    unpadded pair, forward and backward, for ours and Marian, under the math SDPA backend
    (the counter misses the CPU flash kernel's attention products).
    """
    d, f, v = cfg.d_model, cfg.d_ff, vocab_size
    k = cfg.kv_heads * (d // cfg.n_heads)
    m = 3 if cfg.activation == "swiglu" else 2
    s, t = src_lens.astype(np.int64), tgt_lens.astype(np.int64)
    projections = 2 * d * d + 2 * d * k
    encoder_layer = s * projections + 2 * s * s * d + s * m * d * f
    self_attention_block = t * projections + 2 * t * t * d + t * m * d * f
    cross_attention = 2 * t * d * d + 2 * s * d * k + 2 * t * s * d
    decoder_layer = self_attention_block + cross_attention
    forward = cfg.n_layers * encoder_layer + cfg.decoder_layers * decoder_layer + t * d * v
    return int(3 * 2 * forward.sum())


# --- one run (in its own process) ---------------------------------------------------------


def _run_info(updater: Updater, args: SimpleNamespace) -> dict:
    """What the figures depend on besides the model: device, precision, threads, versions."""
    info = {
        "device": str(updater.device),
        "precision": args.precision,
        "compile": args.compile,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "max_tokens": args.max_tokens,
        "pad_to_multiple": args.pad_to_multiple,
        "steps": args.steps,
    }
    if isinstance(updater.model, MarianForUpdater):
        import transformers

        info["transformers"] = transformers.__version__
        info["attn_implementation"] = updater.model.marian.config._attn_implementation
    return info


def _peak_memory_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# --- output -------------------------------------------------------------------------------


def print_table(results: list[dict], file=sys.stdout) -> None:
    """One row per run; "vs HF" is tokens/s over HF Marian's (SDPA attention) at the same size."""
    hf_speed = {r["size"]: r["tgt_tokens_per_s"] for r in results if r["system"] == "hf"}
    w = max([9] + [len(r["system"]) + 1 for r in results])  # the system column
    print(
        f"{'system':<{w}}{'size':<11}{'params':>8}{'tgt tok/s':>11}{'step s':>9}{'peak MiB':>10}"
        f"{'MFU':>8}{'vs HF':>7}",
        file=file,
    )
    for r in results:
        mfu = "-" if r["mfu"] is None else f"{r['mfu']:.1%}"
        speed = r["tgt_tokens_per_s"]
        vs_hf = f"{speed / hf_speed[r['size']]:.2f}" if r["size"] in hf_speed else "-"
        print(
            f"{r['system']:<{w}}{r['size']:<11}{r['params_m']:>7}M{speed:>11}{r['step_time_s']:>9}"
            f"{r['peak_memory_mib']:>10}{mfu:>8}{vs_hf:>7}",
            file=file,
        )
    if results:
        print(_table_footer(results), file=file)


def _table_footer(results: list[dict]) -> str:
    r = results[0]
    line = f"{r['device']} x{r['threads']} threads, {r['precision']}, torch {r['torch']}"
    if r["compile"]:
        line += " (torch.compile)"
    hf = next((row for row in results if row["system"] in HF_ATTENTION), None)
    if hf is not None:
        line += f", transformers {hf['transformers']}"
    if r["peak_gflops"] is not None:
        line += f"; MFU against {r['peak_gflops']} GFLOP/s ({r['peak_source']})"
    return line


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
