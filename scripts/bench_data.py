"""Benchmark the data pipeline on Multi30k train: tokenizer training, encoding, batching, padding.

    python scripts/bench_data.py [--data DIR] [--vocab-size 8000] [--max-tokens 4096 ...]

Prints one JSON object per measurement, then a table. `scripts/benchmark.py data` calls
`add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled

import datasets  # noqa: E402
from bench_machine import run_standalone  # noqa: E402

from transformer_mt.config import TokenizerConfig  # noqa: E402
from transformer_mt.data.cursor import BatchIterator  # noqa: E402
from transformer_mt.data.dataset import column_texts, load_split  # noqa: E402
from transformer_mt.data.encoding import encode_corpus  # noqa: E402
from transformer_mt.data.readers import read_text_pair  # noqa: E402
from transformer_mt.data.tokenizer_training import train_tokenizers  # noqa: E402

DEFAULT_DATA = REPO / "data" / "multi30k"  # what `make data` fills


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of train.LANG[.gz]")
    parser.add_argument("--src-lang", default="de")
    parser.add_argument("--tgt-lang", default="en")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--seed", type=int, default=1)


def run(args: argparse.Namespace) -> list[dict]:
    """All measurements, one JSON-serialisable dict each (name, value, unit, settings)."""
    datasets.disable_progress_bars()
    results: list[dict] = []

    def record(name: str, value: float, unit: str, **settings: object) -> None:
        results.append({"bench": "data", "name": name, "value": round(value, 4), "unit": unit,
                        **settings})  # fmt: skip

    start = time.perf_counter()
    corpus = _read_train(args)
    record("read_train", time.perf_counter() - start, "s", pairs=len(corpus))
    src_texts, tgt_texts = column_texts(corpus, "src"), column_texts(corpus, "tgt")
    cfg = TokenizerConfig(vocab_size=args.vocab_size, joint=True)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        pair = train_tokenizers(cfg, src_texts, tgt_texts, Path(tmp) / "run")
        record("train_tokenizer", time.perf_counter() - start, "s", vocab_size=args.vocab_size)
        for threads in (1, -1):
            start = time.perf_counter()
            encoded = encode_corpus(corpus, pair.src, pair.tgt, None, num_threads=threads)
            record("encode", time.perf_counter() - start, "s", num_threads=threads)
        cache = Path(tmp) / "cache"
        start = time.perf_counter()
        encode_corpus(corpus, pair.src, pair.tgt, cache)
        record("encode_and_cache", time.perf_counter() - start, "s")
        start = time.perf_counter()
        encode_corpus(corpus, pair.src, pair.tgt, cache)
        record("load_cached", time.perf_counter() - start, "s")
    for max_tokens in args.max_tokens:
        results.extend(_measure_batches(encoded, max_tokens, args.seed))
    return results


def _read_train(args: argparse.Namespace) -> datasets.Dataset:
    plain = args.data / f"train.{args.src_lang}"
    if plain.exists():
        return read_text_pair(plain, args.data / f"train.{args.tgt_lang}")
    from transformer_mt.config import DataConfig

    cfg = DataConfig(src_lang=args.src_lang, tgt_lang=args.tgt_lang, train=str(args.data / "train"))
    return load_split(cfg, "train")


def _measure_batches(encoded, max_tokens: int, seed: int) -> list[dict]:
    """One epoch through the iterator: batches/s (collate included) and padding share."""
    iterator = BatchIterator(encoded, max_tokens, seed)
    pads = total = n_batches = 0
    start = time.perf_counter()
    for batch in iterator.iterate(epoch=0):
        n_batches += 1
        pads += int((batch.src_ids == 0).sum()) + int((batch.tgt_out_ids == 0).sum())
        total += batch.src_ids.numel() + batch.tgt_out_ids.numel()
    elapsed = time.perf_counter() - start
    common = {"max_tokens": max_tokens, "batches": n_batches}
    return [
        {"bench": "data", "name": "batches_per_s", "value": round(n_batches / elapsed, 1),
         "unit": "batch/s", **common},
        {"bench": "data", "name": "padding_ratio", "value": round(pads / total, 4),
         "unit": "pad/token", **common},
    ]  # fmt: skip


def print_table(results: list[dict], file=sys.stdout) -> None:
    print(f"{'measurement':<20} {'value':>10}  {'unit':<10} settings", file=file)
    for row in results:
        settings = {k: v for k, v in row.items() if k not in ("bench", "name", "value", "unit")}
        extra = " ".join(f"{k}={v}" for k, v in settings.items())
        print(f"{row['name']:<20} {row['value']:>10}  {row['unit']:<10} {extra}", file=file)


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
