"""Train a config, translate its test set with beam search, and score it: one experiment.

    python scripts/run_experiment.py [--config configs/multi30k_de_en.yaml] [--average N]

Without --config it takes the quickstart recipe for the machine (`quickstart_config`, one line
on stderr says which and why): the GPU recipe where torch sees a CUDA device, else the CPU one.
Runs (or resumes) `tmt train`, averages the periodic checkpoints it kept (`train.keep_last`;
`--average N`: the last N; none kept or N <= 1: best.pt is decoded instead), translates
`data.test` with the config's decode settings and prints detokenized cased BLEU, lowercased
BLEU and chrF (sacrebleu); `--joined 2 3` also scores test inputs of 2 and 3 consecutive
sentences joined into one line against the joined references, each line translated whole
(length generalisation; see `inference.paragraphs`). A config in several directions is also
scored in every direction of the model (supervised and zero-shot, `--pivot en` adding
zero-shot ones through English), with the off-target rate of each: one table
(`inference.directions`). Writes `test.hyp` and `results.json` into the run directory; the
README's results table is made from those files (scripts/results_table.py). When training
stops before its end (SIGTERM, Ctrl-C, an error) nothing is averaged or scored and the exit
status is training's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CPU_RECIPE = "configs/multi30k_de_en.yaml"
GPU_RECIPE = "configs/multi30k_de_en_gpu.yaml"
RESULTS_NAME = "results.json"  # the scores of an experiment, read by scripts/results_table.py
HYPOTHESES_NAME = "test.hyp"  # its translation of data.test

import torch  # noqa: E402

from transformer_mt.artifacts import load_checkpoint, load_for_inference  # noqa: E402
from transformer_mt.cli import main as tmt  # noqa: E402
from transformer_mt.cli.common import Parser  # noqa: E402
from transformer_mt.config import DataConfig, ExperimentConfig, load_config  # noqa: E402
from transformer_mt.data.dataset import column_texts, load_split  # noqa: E402
from transformer_mt.data.locations import check_sources  # noqa: E402
from transformer_mt.errors import TmtError  # noqa: E402
from transformer_mt.evaluation import bleu_tokenize, corpus_scores  # noqa: E402
from transformer_mt.files import atomic_open  # noqa: E402
from transformer_mt.inference.direction_scores import directions_table, score_directions  # noqa: E402
from transformer_mt.inference.line_settings import LineSettings  # noqa: E402
from transformer_mt.inference.paragraphs import joined_bleu  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.machine import resolve_device  # noqa: E402
from transformer_mt.run_layout import BEST_NAME, CHECKPOINTS_DIR, LAST_NAME  # noqa: E402
from transformer_mt.training.signals import EXIT_CODES  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--config", help="default: the quickstart recipe for this machine")
    p.add_argument("--run-dir", help="default: runs/<config name>")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides")
    p.add_argument(
        "--average",
        type=int,
        help="average the last N checkpoints (default: train.keep_last; 0: decode best.pt)",
    )
    p.add_argument("--beam-size", type=int, help="override decode.beam_size")
    p.add_argument(
        "--joined", type=int, nargs="+", default=[], metavar="N", help="sentences per line"
    )
    p.add_argument("--pivot", help="several directions: also score zero-shot ones through it")
    return p.parse_args()


def quickstart_config() -> tuple[str, str]:
    """(the quickstart config for this machine, why): the GPU recipe when torch sees a CUDA
    device, whose batches and validation schedule the CPU recipe's would waste; else the CPU
    recipe, sized for an hour on two cores."""
    if resolve_device("auto").type == "cuda":
        return GPU_RECIPE, f"torch sees a CUDA device ({torch.cuda.get_device_name()})"
    return CPU_RECIPE, "torch sees no CUDA device"


def main() -> int:
    args = parse_args()
    if args.config is None:
        recipe, reason = quickstart_config()
        print(
            f"run_experiment: {recipe}: {reason} (--config, or make quickstart CONFIG=FILE, "
            "picks another)",
            file=sys.stderr,
        )
        args.config = str(REPO / recipe)
    run_dir = Path(args.run_dir or REPO / "runs" / Path(args.config).stem)
    try:
        config = load_config(args.config, args.set)
        check_sources(config.data)  # data.test too: it is scored after the hour of training
    except TmtError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    status = train(args, run_dir)
    if status:
        return status
    average = config.train.keep_last if args.average is None else args.average
    checkpoint = run_dir / CHECKPOINTS_DIR / BEST_NAME
    if average > 1:
        checkpoint = run_dir / CHECKPOINTS_DIR / f"average_last{average}.pt"
        status = tmt(["average", str(run_dir), "--last", str(average), "--out", str(checkpoint)])
        if status:
            return status
    results, scores, table = score(args, config, checkpoint, run_dir)
    with atomic_open(run_dir / RESULTS_NAME) as file:
        file.write(json.dumps(results, indent=1) + "\n")
    for line in scores:
        print(line)
    if table is not None:
        print(table)
    return 0


def train(args: argparse.Namespace, run_dir: Path) -> int:
    """Run (or resume) `tmt train`; its exit status, with one line on stderr when it did not
    finish: a stopped or failed run must not be averaged and scored."""
    overrides = ["--set", *args.set] if args.set else []
    status = tmt(["train", "--config", args.config, "--run-dir", str(run_dir), *overrides])
    if status:
        stopped = status in EXIT_CODES.values()  # SIGINT, SIGTERM, SIGHUP: resumable
        print(
            f"run_experiment: training {'was stopped' if stopped else 'failed'} (exit status "
            f"{status}); not scoring {run_dir}"
            + ("; run the same command again to resume" if stopped else ""),
            file=sys.stderr,
        )
    return status


def score(
    args: argparse.Namespace, config: ExperimentConfig, checkpoint: Path, run_dir: Path
) -> tuple[dict, list[str], str | None]:
    """Translate `data.test` with `checkpoint` (into test.hyp) and score it: the results
    (results.json's fields), the score lines to print and, for a model of several
    directions, the table of every direction (None for one)."""
    # Search settings come from the config file as it is now, so that a length penalty tuned
    # on the valid set after training applies without retraining.
    test = load_split(config.data, "test")
    sources, references = column_texts(test, "src"), column_texts(test, "tgt")
    decode = dataclasses.asdict(config.decode)
    if args.beam_size is not None:
        decode["beam_size"] = args.beam_size
    device = resolve_device("auto").type  # a GPU decodes the test set where there is one
    translator = Translator.from_checkpoint(str(checkpoint), device=device, **decode)
    hypotheses = [t.texts[0] for t in translator.translate(sources)]
    with atomic_open(run_dir / HYPOTHESES_NAME) as file:
        file.write("\n".join(hypotheses) + "\n")
    tokenize = bleu_tokenize(config.data.tgt_lang)
    cased = corpus_scores(hypotheses, references, ["bleu", "chrf"], tokenize=tokenize)
    lower = corpus_scores(hypotheses, references, ["bleu"], lowercase=True, tokenize=tokenize)
    stats = load_checkpoint(run_dir / CHECKPOINTS_DIR / LAST_NAME).training.stats
    results = {
        "config": args.config,
        "direction": f"{config.data.src_lang}-{config.data.tgt_lang}",
        "test": config.data.test,
        "checkpoint": checkpoint.name,
        "beam_size": translator.decode.beam_size,
        "length_penalty": translator.decode.length_penalty,
        "bleu": cased[0].score,
        "bleu_signature": cased[0].signature,
        "bleu_lowercase": lower[0].score,
        "bleu_lowercase_signature": lower[0].signature,
        "chrf": cased[1].score,
        # Of the checkpoint's model: the translator's packed layers hold weights as buffers.
        "parameters": sum(p.numel() for p in load_for_inference(checkpoint).model.parameters()),
        "train_minutes": stats.get("elapsed_seconds", 0.0) / 60,
    }
    if args.joined:
        results["train_max_src_tokens"] = longest_training_source(translator, config.data)
        # Length generalisation: the model reads each joined line whole, not split.
        whole = Translator.from_checkpoint(
            str(checkpoint), device=device, lines=LineSettings(split_sentences=False), **decode
        )
    for n in args.joined:
        bleu, length = joined_bleu(whole, sources, references, n)
        results[f"joined{n}_bleu"], results[f"joined{n}_src_tokens"] = bleu, length
    table = None
    if len(config.data.directions()) > 1:
        scores = score_directions(
            str(checkpoint), test=config.data.test, pivot=args.pivot, device=device, **decode
        )  # the test set of the headline scores, which a resume may have changed
        results["directions"] = [dataclasses.asdict(score) for score in scores]
        table = directions_table(scores)
    return results, [score.string for score in (*cased, *lower)], table


def longest_training_source(translator: Translator, data: DataConfig) -> int:
    """The longest source of `data`'s training split, in the translator's subwords."""
    sources = column_texts(load_split(data, "train"), "src")
    return max(len(translator.encoding.source_ids(text)) for text in sources)


if __name__ == "__main__":
    sys.exit(main())
