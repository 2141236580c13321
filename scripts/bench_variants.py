"""Model variants side by side: trained runs' test scores, size, decoding cache and speed.

    python scripts/benchmark.py variants --runs runs/cmp/sinusoidal runs/cmp/rope ...
                                         [--batch-size 64] [--joined 1 2 4 8] [--threads 1]

Each run directory is one made by scripts/run_experiment.py (its `results.json` and the
checkpoint it scored). Per run: parameters, test BLEU (cased, lowercased) and chrF from
`results.json`; the decoder self-attention cache in bytes per target token of one hypothesis
in float32 (`ModelConfig.self_attention_cache_bytes`); beam search sentences/s over the test
set in length-sorted batches of --batch-size sentences, with the checkpoint's decode settings
and `tmt translate`'s model (packed layers where they pay), every run measured in this one
process one after another; and, for length generalisation, cased BLEU on test inputs made of
n consecutive test sentences joined into one line (scored against the joined references),
with the mean source length in subwords beside the longest training source.

`scripts/benchmark.py variants` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_translate import make_batches  # noqa: E402

from transformer_mt.data.tokenizer import EOS_ID, PAD_ID  # noqa: E402
from transformer_mt.evaluation import corpus_scores  # noqa: E402
from transformer_mt.files import read_lines  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.search import search  # noqa: E402


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="run directories")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (speed)")
    parser.add_argument(
        "--joined", type=int, nargs="+", default=[1, 2, 4, 8], help="sentences/line"
    )
    parser.add_argument("--threads", type=int, default=1)


def run(args: argparse.Namespace) -> list[dict]:
    torch.set_num_threads(args.threads)
    rows = []
    for run_dir in args.runs:
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
        checkpoint = run_dir / "checkpoints" / results["checkpoint"]
        translator = Translator.from_checkpoint(str(checkpoint))
        cfg = translator.model.cfg
        config = _run_config(run_dir)
        src, ref = _test_files(config)
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
            "train_max_src_tokens": _longest_training_source(translator, config),
        }
        for n in args.joined:
            bleu, length = _joined_bleu(translator, src, ref, n)
            row[f"joined{n}_bleu"], row[f"joined{n}_src_tokens"] = bleu, length
        print(json.dumps(row), file=sys.stderr, flush=True)  # progress
        rows.append(row)
    return rows


def _run_config(run_dir: Path) -> dict:
    import yaml

    return yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))


def _test_files(config: dict) -> tuple[list[str], list[str]]:
    data = config["data"]
    prefix = REPO / data["test"]
    return (
        read_lines(f"{prefix}.{data['src_lang']}"),
        read_lines(f"{prefix}.{data['tgt_lang']}"),
    )


def _attention_name(cfg) -> str:
    if cfg.attention == "mla":
        return f"mla r={cfg.kv_rank}"
    if cfg.kv_heads == cfg.n_heads:
        return "mha"
    return "mqa" if cfg.kv_heads == 1 else f"gqa {cfg.kv_heads} kv heads"


def _speed(translator: Translator, lines: list[str], batch_size: int) -> float:
    """Sentences/s of beam search over `lines` in batches of `batch_size` (after a warm-up)."""
    sources = [translator.source_ids(line) + [EOS_ID] for line in lines]
    batches = make_batches(sources, batch_size)
    model, decode, options = translator.model, translator.decode, translator.options

    def translate(src_ids: torch.Tensor) -> None:
        search(model, src_ids, (src_ids != PAD_ID)[:, None, None, :], decode, options)

    translate(batches[0][:4])
    start = time.perf_counter()
    for src_ids in batches:
        translate(src_ids)
    return round(len(lines) / (time.perf_counter() - start), 1)


def _joined_bleu(
    translator: Translator, src: list[str], ref: list[str], n: int
) -> tuple[float, float]:
    """Cased BLEU of lines joining n consecutive test sentences, and their mean length."""
    starts = range(0, len(src) - n + 1, n)
    joined_src = [" ".join(src[i : i + n]) for i in starts]
    joined_ref = [" ".join(ref[i : i + n]) for i in starts]
    hypotheses = [t.texts[0] for t in translator.translate(joined_src)]
    bleu = corpus_scores(hypotheses, joined_ref, ["bleu"])[0].score
    length = statistics.mean(len(translator.source_ids(line)) for line in joined_src)
    return round(bleu, 2), round(length, 1)


def _longest_training_source(translator: Translator, config: dict) -> int:
    data = config["data"]
    lines = read_lines(f"{REPO / data['train']}.{data['src_lang']}")
    return max(len(translator.source_ids(line)) for line in lines)


COLUMNS = [
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
    print("| run | " + " | ".join(title for _, title in COLUMNS) + " |", file=file)
    print("|" + "---|" * (len(COLUMNS) + 1), file=file)
    for row in results:
        cells = [str(row[key]) for key, _ in COLUMNS]
        print(f"| {Path(row['run']).name} | " + " | ".join(cells) + " |", file=file)
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    print_table(run(parser.parse_args()))
