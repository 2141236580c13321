"""Practical matrix-multiply throughput (GFLOP/s) in fp32 and bf16 at Transformer shapes.

    python scripts/bench_matmul.py [--dtypes fp32 bf16] [--libraries torch onednn]
        [--repeats 5] [--threads 2]

The ceiling every model figure should be read against: (tokens x d_model) @ (d_model x d_ff)
feed-forward products, and the (tokens x d_model) @ (d_model x vocab) output projection. Prints
one JSON object per (library, dtype, shape) plus one with the best shape per library and
dtype, then a table. Libraries: `torch`, what `torch.mm` and `nn.Linear` run (on x86, MKL's
sgemm in fp32 and oneDNN in bf16); `onednn`, a linear layer through oneDNN with its weight
packed once (`torch.ops.mkldnn._linear_pointwise`, what torch.compile's CPU freezing uses),
fp32 only. `scripts/benchmark.py matmul` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402
from bench_machine import load_average, machine_info, run_standalone, table_footer  # noqa: E402
from torch import Tensor  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
LIBRARIES = ["torch", "onednn"]
# (M, K, N): M tokens of a 4096-token batch, K = d_model, N = d_ff or vocabulary size.
SHAPES = [(4096, 256, 1024), (4096, 512, 2048), (4096, 512, 8000)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["fp32", "bf16"])
    parser.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=["torch"])
    parser.add_argument("--repeats", type=int, default=5, help="timed products; best is kept")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")


def run(args: argparse.Namespace) -> list[dict]:
    """One dict per (dtype, shape), then one `max` dict per dtype."""
    torch.set_num_threads(args.threads)
    results: list[dict] = []
    for library in args.libraries:
        for name in args.dtypes:
            if library == "onednn" and name != "fp32":
                continue
            rows = [measure(name, shape, args.repeats, library) for shape in SHAPES]
            best = max(rows, key=lambda r: r["gflops"])
            results.extend(rows)
            results.append({**best, "shape": "max"})
    machine = machine_info()
    return [{**row, **machine} for row in results]


def measure(
    dtype_name: str, shape: tuple[int, int, int], repeats: int, library: str = "torch"
) -> dict:
    """Best-of-`repeats` GFLOP/s of one (M x K) @ (K x N) product (also bench_train's peak)."""
    m, k, n = shape
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=generator).to(DTYPES[dtype_name])
    b = torch.randn(k, n, generator=generator).to(DTYPES[dtype_name])
    product = _product(a, b, library)
    product()  # warm-up: first-call kernel selection and page faults
    load = load_average()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        product()
        times.append(time.perf_counter() - start)
    best = min(times)  # best of N: the least disturbed by other processes
    return {
        "bench": "matmul",
        "library": library,
        "dtype": dtype_name,
        "shape": f"({m}x{k})@({k}x{n})",
        "gflops": round(2 * m * k * n / best / 1e9, 1),
        "best_ms": round(best * 1e3, 2),
        "median_ms": round(sorted(times)[len(times) // 2] * 1e3, 2),
        "repeats": repeats,
        "load_before": load,
    }


def _product(a: Tensor, b: Tensor, library: str) -> Callable[[], Tensor]:
    """a @ b through `library`, with everything that can be prepared once prepared."""
    if library == "torch":
        out = torch.empty(a.size(0), b.size(1), dtype=a.dtype)
        return lambda: torch.mm(a, b, out=out)
    weight = b.t().contiguous()  # (N, K), as nn.Linear holds it
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, a.size(0))
    return lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], "")


def print_table(results: list[dict], file=sys.stdout) -> None:
    header = f"{'library':<8}{'dtype':<6}{'shape':<26}{'GFLOP/s':>9}{'best ms':>9}{'median ms':>11}"
    print(header, file=file)
    for r in results:
        print(
            f"{r['library']:<8}{r['dtype']:<6}{r['shape']:<26}{r['gflops']:>9}"
            f"{r['best_ms']:>9}{r['median_ms']:>11}",
            file=file,
        )
    if results:
        print(table_footer(results[0]), file=file)


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
