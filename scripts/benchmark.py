"""One entry point for the benchmarks: matmul, training, translation, data, attention, threads,
serving, what a new training batch shape costs, trained model variants, streamed training,
translation cost growth, the compiled decoding step, offline language identifiers, sentence
splitters, joined-sentence paragraphs, glossaries, the dropped-content check, fast students
(BLEU against speed, ours and CTranslate2).

    python scripts/benchmark.py matmul [--dtypes fp32 bf16]
    python scripts/benchmark.py train [--sizes quickstart base]
    python scripts/benchmark.py translate [--fixed-length 20] [--beams 5 1] [--batch-sizes 32 64]
    python scripts/benchmark.py data [--max-tokens 1024 4096]
    python scripts/benchmark.py attention [--parts heads patterns] [--lengths 256 1024 4096]
    python scripts/benchmark.py threads [--seconds 60] [--loads 0 1] [--load-delay 25]
    python scripts/benchmark.py serve --checkpoint CKPT [--rates 2 8 0] [--clients 32]
    python scripts/benchmark.py shapes [--max-tokens 8192] [--allocators default expandable]
    python scripts/benchmark.py variants --runs RUN_DIR [RUN_DIR ...] [--joined 1 2 3]
    python scripts/benchmark.py variants --architectures NAME=OVERRIDES [...] [--config CONFIG]
    python scripts/benchmark.py stream --corpora PREFIX [PREFIX ...] [--steps 200]
    python scripts/benchmark.py growth [--lengths 10 20 40 80 160] [--beams 1 2 5 10] [--plot PNG]
    python scripts/benchmark.py compile --checkpoint CKPT [--beams 1 5] [--variants eager-plain ...]
    python scripts/benchmark.py langid [--splits test2016 valid] [--identifiers lingua-all ...]
    python scripts/benchmark.py splitters [--langs en de fr cs ja] [--joins 1 2 4 8]
    python scripts/benchmark.py paragraphs --checkpoint CKPT [--joins 1 2 4 8]
    python scripts/benchmark.py glossary --checkpoint CKPT [--batch-size 64] [--beam-size 5]
    python scripts/benchmark.py dropped --checkpoint CKPT [--joins 2 3 4] [--batch-size 64]
    python scripts/benchmark.py students --checkpoints NAME=CKPT [...] [--limit N] [--plot PNG]

Each subcommand is a `bench_<name>.py` module with `add_arguments(parser)` and
`run(args) -> list[dict]`, runnable on its own too. Here every result becomes one JSON line on
stdout (machine-readable, appendable to a log), preceded by a `machine` line (CPU, threads,
versions, load), and a human table goes to stderr, or to stdout after the JSON with --table.
Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench_* modules sit next to us

from bench_machine import machine_info  # noqa: E402

from transformer_mt.cli.common import Parser, run_command  # noqa: E402

BENCHMARKS = {
    "matmul": "bench_matmul",
    "train": "bench_train",
    "translate": "bench_translate",
    "data": "bench_data",
    "attention": "bench_attention",
    "threads": "bench_threads",
    "serve": "bench_serve",
    "shapes": "bench_shapes",
    "variants": "bench_variants",
    "stream": "bench_stream",
    "growth": "bench_growth",
    "compile": "bench_compile",
    "langid": "bench_langid",
    "splitters": "bench_splitters",
    "paragraphs": "bench_paragraphs",
    "glossary": "bench_glossary",
    "dropped": "bench_dropped",
    "students": "bench_students",
}


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="print the table on stdout")
    commands = parser.add_subparsers(dest="benchmark", required=True)
    modules = {}
    for name, module_name in BENCHMARKS.items():
        # Imported lazily per subcommand would hide a broken module until its turn; importing
        # all keeps `--help` honest and costs a second.
        modules[name] = importlib.import_module(module_name)
        sub = commands.add_parser(name, help=modules[name].__doc__.splitlines()[0])
        modules[name].add_arguments(sub)
    args = parser.parse_args(argv)
    _refuse_counts_below_one(parser, args)
    module = modules[args.benchmark]
    # Some modules print their own JSON progress on stdout; keep stdout to our lines only.
    results: list[dict] = []

    def bench() -> int:
        results.extend(module.run(args))
        return 0

    with contextlib.redirect_stdout(sys.stderr):
        status = run_command(bench, own_signals=False, describe=str)
    if status:  # a bad checkpoint or data path: one line said why
        raise SystemExit(status)
    print(json.dumps({"bench": "machine", **machine_info()}), flush=True)
    for row in results:
        print(json.dumps(row), flush=True)
    table_file = sys.stdout if args.table else sys.stderr
    print(file=table_file)
    _print_table(module, results, table_file)


# Options of the benchmarks that count something (a thread, a beam, a repeat, a sentence):
# each of their values is 1 or more.
COUNTS = (
    "batch_size", "batch_sizes", "beam_size", "beams", "clients", "fixed_length", "joins",
    "lengths", "max_len", "max_tokens", "repeats", "sentences", "shapes", "steps", "threads",
    "vocab_size", "workers",
)  # fmt: skip


def _refuse_counts_below_one(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in COUNTS:
        value = getattr(args, name, None)
        values = value if isinstance(value, list) else [value]
        low = [v for v in values if isinstance(v, int) and v < 1]
        if low:
            parser.error(f"--{name.replace('_', '-')} {low[0]}: must be 1 or more")


def _print_table(module, results: list[dict], file) -> None:
    """The module's own table; bench_data prints to stdout only."""
    if hasattr(module, "print_table"):
        try:
            module.print_table(results, file=file)
            return
        except TypeError:  # a print_table(results) without a file argument
            with contextlib.redirect_stdout(file):
                module.print_table(results)
            return
    for row in results:
        print("  ".join(f"{k}={v}" for k, v in row.items()), file=file)


if __name__ == "__main__":
    main()
