"""Benchmark training throughput: target tokens/s, step time and peak memory per model size.

    python scripts/bench_train.py [--sizes quickstart base] [--steps 5] [--max-tokens 4096]

Synthetic batches with a Multi30k-like length distribution (about 15 subword tokens a sentence)
go through the real update (`Trainer.train_step`: forward, label-smoothed loss, backward, clip,
Adam). Each size runs in a fresh process so its peak memory (ru_maxrss on CPU, the CUDA
allocator's peak on GPU) is its own. Prints one JSON object per size, then a table.
`scripts/benchmark.py train` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import resource
import sys
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled

import numpy as np  # noqa: E402
import torch  # noqa: E402

from transformer_mt.config import ExperimentConfig, ModelConfig, TrainConfig  # noqa: E402
from transformer_mt.data.batching import BatchIterator  # noqa: E402
from transformer_mt.data.encoding import EncodedCorpus, TokenColumn  # noqa: E402
from transformer_mt.data.tokenizer import PAD_ID  # noqa: E402
from transformer_mt.model import build_model  # noqa: E402
from transformer_mt.training.trainer import TrainData, Trainer, UpdateTotals  # noqa: E402

SIZES = {
    # configs/quickstart-like: what a laptop trains on Multi30k
    "quickstart": ModelConfig(d_model=256, n_heads=4, n_layers=3, d_ff=1024),
    # Vaswani et al. (2017) base
    "base": ModelConfig(d_model=512, n_heads=8, n_layers=6, d_ff=2048),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=list(SIZES))
    parser.add_argument("--steps", type=int, default=5, help="timed updates per size")
    parser.add_argument("--warmup", type=int, default=2, help="untimed updates first")
    parser.add_argument("--max-tokens", type=int, default=4096, help="token budget per batch")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: auto")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")


def run(args: argparse.Namespace) -> list[dict]:
    """One result dict per size, each measured in a fresh (spawned) process."""
    context = multiprocessing.get_context("spawn")
    results = []
    for size in args.sizes:
        with context.Pool(1) as pool:
            result = pool.apply(_measure, (size, vars(args)))
        print(json.dumps(result), flush=True)
        results.append(result)
    return results


def synthetic_corpus(n_pairs: int, vocab_size: int, seed: int = 0) -> EncodedCorpus:
    """Pairs with Multi30k-like lengths: source ~ N(14, 4) tokens, target ~ source +- 20%."""
    rng = np.random.default_rng(seed)
    src_lens = np.clip(rng.normal(14, 4, n_pairs).round(), 3, 40).astype(int)
    tgt_lens = np.clip((src_lens * rng.normal(1.0, 0.2, n_pairs)).round(), 3, 40).astype(int)

    def column(lengths: np.ndarray) -> TokenColumn:
        return TokenColumn.from_lists([rng.integers(4, vocab_size, n).tolist() for n in lengths])

    return EncodedCorpus(column(src_lens), column(tgt_lens))


def _measure(size: str, options: dict) -> dict:
    args = SimpleNamespace(**options)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    config = ExperimentConfig(
        model=SIZES[size],
        train=TrainConfig(
            max_steps=10**6, max_tokens=args.max_tokens, precision=args.precision, log_every=10**6
        ),
    )
    corpus = synthetic_corpus(6000, args.vocab_size)
    torch.manual_seed(0)
    model = build_model(config.model, args.vocab_size, args.vocab_size, PAD_ID)
    data = TrainData(BatchIterator(corpus, args.max_tokens, seed=1), [], None, [])
    tokenizer = SimpleNamespace(model_bytes=b"")
    trainer = Trainer(config, model, data, tokenizer, tokenizer, "/nonexistent", device=device)
    for _ in range(args.warmup):
        trainer.train_step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    totals, times = UpdateTotals(), []
    for _ in range(args.steps):
        start = time.perf_counter()
        trainer.train_step(totals)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    peak = (
        torch.cuda.max_memory_allocated() / 2**20
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    )
    return {
        "benchmark": "train",
        "size": size,
        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
        "device": str(device),
        "precision": args.precision,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "max_tokens": args.max_tokens,
        "steps": args.steps,
        "tgt_tokens_per_s": round(totals.tokens / sum(times), 1),
        "step_time_s": round(float(np.median(times)), 4),
        "peak_memory_mib": round(peak, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    results = run(parser.parse_args())
    print(f"\n{'size':<11}{'params':>8}{'tgt tok/s':>11}{'step s':>9}{'peak MiB':>10}  device")
    for r in results:
        print(
            f"{r['size']:<11}{r['params_m']:>7}M{r['tgt_tokens_per_s']:>11}"
            f"{r['step_time_s']:>9}{r['peak_memory_mib']:>10}  {r['device']} x{r['threads']} "
            f"threads, torch {r['torch']}"
        )


if __name__ == "__main__":
    main()
