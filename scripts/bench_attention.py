"""Attention variants: MHA vs GQA vs MQA in beam search, full vs local attention by length, and
the kernel for training attention by length.

    python scripts/bench_attention.py [--parts heads patterns training] [--kv-heads 4 2 1]
                                      [--lengths 256 1024 4096] [--train-lengths 16 64 128 256]
                                      [--threads 1]

heads: the quickstart model (d_model 256, 4 heads, 3+3 layers, vocab 8000, random weights)
with n_kv_heads 4 (MHA), 2 (GQA) and 1 (MQA) translates the first --sentences sentences of
Multi30k test2016 with beam 5, batch 64 and a fixed output length (equal work for random
weights; inputs as in bench_translate). Reported: target tokens/s (best of --repeats) and the
peak bytes held by the decoder cache (self-attention buffers, capacity included, plus the
cross-attention keys/values), sampled after every decoding step.

patterns: one self-attention call, (1, 4 heads, L, 64) fp32, for L in --lengths: full vs
local (window 16) attention, local through the SDPA path (dense mask) and through flex
attention (block mask; compiled with torch.compile on the CPU as well, the compile time is
reported apart). Each case runs in a fresh process; its peak resident memory (VmHWM, reset
after set-up, minus what the process held before the calls; Linux) is the extra memory the
calls needed. `mask_ms` is building
the mask or block mask, which a model does once per forward for all its layers.

training: causal self-attention forward and backward over a batch of --train-tokens tokens
(8 heads of 64, batch = tokens / L) for L in --train-lengths, in float32 and bfloat16, through
SDPA's kernel (`sdpa`), the plain math (`math`, `attention_with_weights`) and `attention`
(`ours`, transformer_mt/kernels.py's table, which picks one of the two): what
`CPU_MATH_MAX_KEYS` there is set from.

Prints one JSON object per case, then tables. `scripts/benchmark.py attention` calls
`add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from bench_machine import machine_info, run_standalone, table_footer  # noqa: E402
from bench_translate import QUICKSTART, decode_config, load_model, make_batches  # noqa: E402

from transformer_mt.data.tokenizer import EOS_ID, PAD_ID  # noqa: E402
from transformer_mt.kernels import attention  # noqa: E402
from transformer_mt.model import AttentionPattern  # noqa: E402
from transformer_mt.model.attention import attention_with_weights  # noqa: E402
from transformer_mt.search import SearchOptions, search  # noqa: E402
from transformer_mt.text_files import read_lines  # noqa: E402

DEFAULT_DATA = REPO / "data" / "multi30k"
PATTERN_CASES = [("full", "sdpa"), ("local", "sdpa"), ("full", "flex"), ("local", "flex")]
TRAINING_BACKENDS = {
    "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "math": lambda q, k, v: attention_with_weights(q, k, v, is_causal=True)[0],
    "ours": lambda q, k, v: attention(q, k, v, is_causal=True),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=["heads", "patterns", "training"],
        default=["heads", "patterns", "training"],
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of test2016")
    parser.add_argument("--kv-heads", type=int, nargs="+", default=[4, 2, 1])
    parser.add_argument("--sentences", type=int, default=256, help="first N test sentences")
    parser.add_argument("--fixed-length", type=int, default=40, help="output tokens per sentence")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--window", type=int, default=16, help="local pattern: reach each side")
    parser.add_argument("--train-lengths", type=int, nargs="+", default=[16, 64, 128, 256])
    parser.add_argument("--train-tokens", type=int, default=4096, help="training: tokens a batch")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes; best is kept")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")


def run(args: argparse.Namespace) -> list[dict]:
    """One dict per (kv heads) and per (length, pattern, backend), each in a fresh process."""
    cases = []
    if "heads" in args.parts:
        cases += [(_measure_heads, (n,)) for n in args.kv_heads]
    if "patterns" in args.parts:
        cases += [
            (_measure_pattern, (length, kind, backend))
            for length in args.lengths
            for kind, backend in PATTERN_CASES
        ]
    if "training" in args.parts:
        cases += [
            (_measure_training, (length, dtype, backend))
            for length in args.train_lengths
            for dtype in ("fp32", "bf16")
            for backend in TRAINING_BACKENDS
        ]
    context = multiprocessing.get_context("spawn")
    machine, results = machine_info(), []
    for function, case in cases:
        with context.Pool(1) as pool:
            row = {**pool.apply(function, (*case, vars(args))), "threads": args.threads}
        row.update({k: v for k, v in machine.items() if k not in row})
        print(json.dumps(row), file=sys.stderr, flush=True)  # progress
        results.append(row)
    return results


# --- heads: cache memory and speed of beam search ----------------------------------------------


class _CachePeak:
    """Wraps a model for `search`, recording the decoder cache's bytes after every step."""

    def __init__(self, model):
        self.model, self.peak = model, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def decode_step(self, tgt_ids, memory, src_mask, sources, cache):
        log_probs, cache = self.model.decode_step(tgt_ids, memory, src_mask, sources, cache)
        held = 0
        for layer in cache.layers:
            held += layer.self_attn.keys.nbytes + layer.self_attn.values.nbytes
            held += sum(t.nbytes for t in layer.cross_attn)
        self.peak = max(self.peak, held)
        return log_probs, cache


def _measure_heads(n_kv_heads: int, options: dict) -> dict:
    args = SimpleNamespace(
        **options, max_len=options["fixed_length"], checkpoint=None, src_lang="de",
        tgt_lang="en", vocab_size=8000, seed=1,
    )  # fmt: skip
    torch.set_num_threads(args.threads)
    model, tokenizer, _ = load_model(args, replace(QUICKSTART, n_kv_heads=n_kv_heads))
    lines = read_lines(args.data / "test2016.de")[: args.sentences]
    batches = make_batches([tokenizer.encode(line) + [EOS_ID] for line in lines], 64)
    cfg = decode_config(5, args)
    recorder = _CachePeak(model)

    def translate() -> int:
        tokens = 0
        for src_ids in batches:
            src_mask = (src_ids != PAD_ID)[:, None, None, :]
            found = search(recorder, src_ids, src_mask, cfg, SearchOptions(max_len_cap=1024))
            tokens += sum(len(r.best.tokens) for r in found)
        return tokens

    translate()  # warm-up
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        tokens = translate()
        times.append(time.perf_counter() - start)
    kind = {QUICKSTART.n_heads: "MHA", 1: "MQA"}.get(n_kv_heads, "GQA")
    return {
        "bench": "attention_heads",
        "attention": kind,
        "n_kv_heads": n_kv_heads,
        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
        "sentences": len(lines),
        "tgt_tokens": tokens,
        "tok_per_s": round(tokens / min(times), 1),
        "cache_peak_mib": round(recorder.peak / 2**20, 2),
    }


# --- patterns: one attention call at long lengths ------------------------------------------------


def _measure_pattern(length: int, kind: str, backend: str, options: dict) -> dict:
    args = SimpleNamespace(**options)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, length, 64) for _ in range(3))
    pattern = AttentionPattern(kind, window=args.window)
    compile_s = None
    if backend == "flex":
        from torch.nn.attention.flex_attention import flex_attention

        compiled = torch.compile(flex_attention)

        def make_mask():
            return pattern.block_mask(length, length)

        def call(mask):
            return compiled(q, k, v, block_mask=mask)

        start = time.perf_counter()
        call(make_mask())  # compiles
        compile_s = round(time.perf_counter() - start, 1)
    else:

        def make_mask():
            return pattern.mask(length, length)

        def call(mask):
            return attention(q, k, v, mask)

    rss_before = _reset_peak_rss()
    mask_times, call_times = [], []
    for _ in range(args.repeats + 1):  # the first pass is a warm-up
        start = time.perf_counter()
        mask = make_mask()
        mask_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        out = call(mask)
        call_times.append(time.perf_counter() - start)
    peak = _proc_status_kib("VmHWM") - rss_before
    assert torch.isfinite(out).all()
    return {
        "bench": "attention_pattern",
        "length": length,
        "pattern": kind if kind == "full" else f"{kind} ±{args.window}",
        "backend": backend,
        "attn_ms": round(1000 * min(call_times[1:]), 2),
        "mask_ms": round(1000 * min(mask_times[1:]), 2),
        "peak_extra_mib": round(peak / 1024, 1),
        "compile_s": compile_s,
    }


# --- training: forward and backward at sentence lengths ------------------------------------------


def _measure_training(length: int, dtype_name: str, backend: str, options: dict) -> dict:
    args = SimpleNamespace(**options)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    batch = max(1, args.train_tokens // length)
    q, k, v = (torch.randn(batch, 8, length, 64, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(batch, 8, length, 64, dtype=dtype)
    function = TRAINING_BACKENDS[backend]
    times = []
    for _ in range(args.repeats + 1):  # the first pass is a warm-up
        start = time.perf_counter()
        function(q, k, v).backward(grad)
        times.append(time.perf_counter() - start)
    return {
        "bench": "attention_training",
        "length": length,
        "batch": batch,
        "dtype": dtype_name,
        "backend": backend,
        "fwd_bwd_ms": round(1000 * min(times[1:]), 2),
    }


def _reset_peak_rss() -> int:
    """Reset the process's peak resident memory (Linux >= 4.0); return the current one, KiB.

    Compiling flex attention peaks far above the attention call itself; without the reset the
    call's own peak would hide under the compiler's.
    """
    Path("/proc/self/clear_refs").write_text("5")
    return _proc_status_kib("VmRSS")


def _proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def print_table(results: list[dict], file=sys.stdout) -> None:
    heads = [r for r in results if r["bench"] == "attention_heads"]
    if heads:
        print(
            f"{'attention':<10}{'kv heads':>9}{'params':>8}{'tok/s':>9}{'cache MiB':>11}", file=file
        )
        for r in heads:
            print(
                f"{r['attention']:<10}{r['n_kv_heads']:>9}{r['params_m']:>7}M{r['tok_per_s']:>9}"
                f"{r['cache_peak_mib']:>11}",
                file=file,
            )
        print(
            f"beam 5, batch 64, {heads[0]['sentences']} sentences, fixed length",
            file=file,
        )
    patterns = [r for r in results if r["bench"] == "attention_pattern"]
    if patterns:
        print(file=file)
        header = f"{'length':>7}  {'pattern':<11}{'backend':<8}{'attn ms':>9}{'mask ms':>9}"
        print(header + f"{'peak MiB':>10}{'compile s':>10}", file=file)
        for r in patterns:
            print(
                f"{r['length']:>7}  {r['pattern']:<11}{r['backend']:<8}{r['attn_ms']:>9}"
                f"{r['mask_ms']:>9}{r['peak_extra_mib']:>10}{r['compile_s'] or '-':>10}",
                file=file,
            )
    training = [r for r in results if r["bench"] == "attention_training"]
    if training:
        print(file=file)
        _print_training(training, file)
    if results:
        print(table_footer(results[0]), file=file)


def _print_training(rows: list[dict], file) -> None:
    """One line per (length, dtype): forward + backward ms of each backend."""
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    print(
        f"{'length':>7}{'batch':>7}  {'dtype':<6}" + "".join(f"{b:>9}" for b in backends), file=file
    )
    cells: dict[tuple, dict] = {}
    for r in rows:
        cells.setdefault((r["length"], r["batch"], r["dtype"]), {})[r["backend"]] = r["fwd_bwd_ms"]
    for (length, batch, dtype), times in cells.items():
        line = "".join(f"{times.get(b, '-'):>9}" for b in backends)
        print(f"{length:>7}{batch:>7}  {dtype:<6}" + line, file=file)
    print("causal self-attention, 8 heads of 64, forward + backward ms (best)", file=file)


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
