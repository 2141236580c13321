"""Model variants side by side: trained runs' test scores, size, decoding cache and speed.

    python scripts/benchmark.py variants --runs runs/cmp/sinusoidal runs/cmp/rope ...
                                         [--batch-size 64] [--joined 1 2 4 8] [--threads 1]
    python scripts/benchmark.py variants --architectures rope=positions=rope mqa=n_kv_heads=1 ...

Each run directory is one made by scripts/run_experiment.py (its `results.json` and the
checkpoint it scored). Per run: parameters, test BLEU (cased, lowercased) and chrF from
`results.json`; the decoder self-attention cache in bytes per target token of one hypothesis
in float32 (`ModelConfig.self_attention_cache_bytes`); beam search sentences/s over the test
set in length-sorted batches of --batch-size sentences, with the checkpoint's decode settings
and `tmt translate`'s model (packed layers unless slower), every run measured in this one
process one after another; and, for length generalisation, cased BLEU on test inputs made of
n consecutive test sentences joined into one line (scored against the joined references),
with the mean source length in subwords beside the longest training source.

With `--architectures NAME=OVERRIDES ...` instead of `--runs`, no training is needed: each
NAME is `--config`'s model changed by its comma-separated `model.` overrides (`rope=positions=rope`,
`mla64=attention=mla,mla_kv_rank=64`; `NAME=` alone: the config's model), built with random
weights over bench_translate's joint 8k vocabulary, and measured for what its architecture
costs: parameters, cache bytes per token and beam-5 sentences/s with every sentence made to
write exactly `--fixed-length` tokens (as bench_translate's), so that all do the same work.

`scripts/benchmark.py variants` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_machine import machine_info, table_footer  # noqa: E402
from bench_translate import (  # noqa: E402
    DEFAULT_DATA,
    as_translate_loads,
    load_model,
    make_batches,
    measure,
    ours_translate,
)
from run_experiment import longest_training_source  # noqa: E402

from transformer_mt.cli.common import Parser  # noqa: E402
from transformer_mt.config import load_config  # noqa: E402
from transformer_mt.data.dataset import column_texts, load_split  # noqa: E402
from transformer_mt.data.tokenizer import EOS_ID, PAD_ID  # noqa: E402
from transformer_mt.inference.line_settings import LineSettings  # noqa: E402
from transformer_mt.inference.paragraphs import joined_bleu  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.search import search  # noqa: E402
from transformer_mt.text_files import read_lines  # noqa: E402


def add_arguments(parser: argparse.ArgumentParser) -> None:
    runs = parser.add_mutually_exclusive_group(required=True)
    runs.add_argument("--runs", type=Path, nargs="+", help="run directories")
    runs.add_argument(
        "--architectures", nargs="+", metavar="NAME=OVERRIDES", help="random-weight models"
    )
    parser.add_argument(
        "--config", default="configs/multi30k_de_en.yaml", help="--architectures' base config"
    )
    parser.add_argument(
        "--fixed-length", type=int, default=20, help="--architectures: tokens per sentence"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (speed)")
    parser.add_argument(
        "--joined", type=int, nargs="+", default=[1, 2, 4, 8], help="sentences/line"
    )
    parser.add_argument("--threads", type=int, default=1)


def run(args: argparse.Namespace) -> list[dict]:
    torch.set_num_threads(args.threads)
    if args.architectures:
        return [_architecture_row(spec, args) for spec in args.architectures]
    rows = []
    for run_dir in args.runs:
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
        checkpoint = run_dir / "checkpoints" / results["checkpoint"]
        # Each line whole: the joined lines measure the model on long inputs, not the splitter.
        translator = Translator.from_checkpoint(
            str(checkpoint), lines=LineSettings(split_sentences=False)
        )
        cfg = translator.model.cfg
        data = load_config(run_dir / "config.yaml").data
        test = load_split(data, "test")
        src, ref = column_texts(test, "src"), column_texts(test, "tgt")
        row = {
            "bench": "variants",
            "run": str(run_dir),
            "positions": cfg.positions,
            "attention": _attention_name(cfg),
            "parameters": results["parameters"],  # of the model before packing
            "bleu": round(results["bleu"], 2),
            "bleu_lowercase": round(results["bleu_lowercase"], 2),
            "chrf": round(results["chrf"], 2),
            "cache_bytes_per_token": cfg.self_attention_cache_bytes(4),
            "sent_per_s": _speed(translator, src, args.batch_size),
            "train_max_src_tokens": results.get("train_max_src_tokens")
            or longest_training_source(translator, data),
        }
        for n in args.joined:  # from results.json when run_experiment.py --joined scored them
            if f"joined{n}_bleu" in results:
                bleu, length = results[f"joined{n}_bleu"], results[f"joined{n}_src_tokens"]
            else:
                bleu, length = joined_bleu(translator, src, ref, n)
            row[f"joined{n}_bleu"], row[f"joined{n}_src_tokens"] = bleu, length
        print(json.dumps(row), file=sys.stderr, flush=True)  # progress
        rows.append(row)
    return rows


def _architecture_row(spec: str, args: argparse.Namespace) -> dict:
    """Size, cache and fixed-length beam-5 speed of one `--architectures` entry."""
    name, _, overrides = spec.partition("=")
    changes = [f"model.{item}" for item in overrides.split(",") if item]
    cfg = load_config(REPO / args.config, changes).model
    options = argparse.Namespace(
        checkpoint=None, data=DEFAULT_DATA, src_lang="de", tgt_lang="en", vocab_size=8000,
        seed=1, fixed_length=args.fixed_length, max_len=args.fixed_length,
    )  # fmt: skip
    model, src_tokenizer, _ = load_model(options, cfg)
    parameters = sum(p.numel() for p in model.parameters())
    sources = [
        src_tokenizer.encode(line) + [EOS_ID] for line in read_lines(options.data / "test2016.de")
    ]
    translate = ours_translate(as_translate_loads(model, torch.device("cpu")), None, 5, options)
    speed, _ = measure(translate, make_batches(sources, args.batch_size), repeats=2)
    row = {
        "bench": "variants",
        "run": name,
        "option": " ".join(changes),
        "positions": cfg.positions,
        "attention": _attention_name(cfg),
        "parameters": parameters,
        "cache_bytes_per_token": cfg.self_attention_cache_bytes(4),
        "sent_per_s": speed["sent_per_s"],
        "fixed_length": args.fixed_length,
        "batch": args.batch_size,
        **machine_info(),
        "load_before": speed["load_before"],
    }
    print(json.dumps(row), file=sys.stderr, flush=True)  # progress
    return row


def _attention_name(cfg) -> str:
    if cfg.attention == "mla":
        return f"mla r={cfg.kv_rank}"
    if cfg.kv_heads == cfg.n_heads:
        return "mha"
    return "mqa" if cfg.kv_heads == 1 else f"gqa {cfg.kv_heads} kv heads"


def _speed(translator: Translator, lines: list[str], batch_size: int) -> float:
    """Sentences/s of beam search over `lines` in batches of `batch_size` (after a warm-up)."""
    sources = [translator.encoding.source_ids(line) + [EOS_ID] for line in lines]
    batches = make_batches(sources, batch_size)
    model, decode, options = translator.model, translator.decode, translator.options

    def translate(src_ids: torch.Tensor) -> None:
        search(model, src_ids, (src_ids != PAD_ID)[:, None, None, :], decode, options)

    translate(batches[0][:4])
    start = time.perf_counter()
    for src_ids in batches:
        translate(src_ids)
    return round(len(lines) / (time.perf_counter() - start), 1)


COLUMNS = [
    ("option", "option"),
    ("positions", "positions"),
    ("attention", "attention"),
    ("parameters", "parameters"),
    ("bleu", "BLEU"),
    ("bleu_lowercase", "BLEU lc"),
    ("chrf", "chrF"),
    ("cache_bytes_per_token", "cache B/token"),
    ("sent_per_s", "sent/s"),
]


def print_table(results: list[dict], file=sys.stdout) -> None:
    columns = [(key, title) for key, title in COLUMNS if key in results[0]]
    print("| run | " + " | ".join(title for _, title in columns) + " |", file=file)
    print("|" + "---|" * (len(columns) + 1), file=file)
    for row in results:
        cells = [str(row[key]) for key, _ in columns]
        print(f"| {Path(row['run']).name} | " + " | ".join(cells) + " |", file=file)
    if "fixed_length" in results[0]:
        print(
            f"random weights, beam 5, batch {results[0]['batch']}, every sentence "
            f"{results[0]['fixed_length']} tokens long; " + table_footer(results[0]),
            file=file,
        )
    joined = sorted(int(k[6:-5]) for k in results[0] if k.startswith("joined") and "bleu" in k)
    if not joined:
        return
    print(file=file)
    longest = results[0]["train_max_src_tokens"]
    heads = [f"{n} joined ({results[0][f'joined{n}_src_tokens']} subwords)" for n in joined]
    print(f"BLEU by input length (longest training source: {longest} subwords)", file=file)
    print("| run | " + " | ".join(heads) + " |", file=file)
    print("|" + "---|" * (len(joined) + 1), file=file)
    for row in results:
        cells = [str(row[f"joined{n}_bleu"]) for n in joined]
        print(f"| {Path(row['run']).name} | " + " | ".join(cells) + " |", file=file)


if __name__ == "__main__":
    parser = Parser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    print_table(run(parser.parse_args()))
