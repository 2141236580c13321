"""Paragraphs: BLEU on test sentences joined n to a line, sentence splitting on against off.

    python scripts/bench_paragraphs.py --checkpoint CKPT [--src FILE --ref FILE]
        [--joins 1 2 4 8] [--beam-size K]

Consecutive sentences of --src are joined n to a line by a space and translated by
`Translator.from_checkpoint(CKPT)` with its decode settings, once with sentence splitting on
(`tmt translate`'s default) and once off (`--no-split`: the model reads the whole line); the
translations are scored with cased BLEU against --ref joined the same way
(`inference.paragraphs.joined_bleu`). n = 1 is the single sentences, the target: with
splitting on, the BLEU of every join should stay within a point of it. BLEU on joined lines
also counts the n-grams across a join, so it is not the single-sentence figure even for
perfect output; the like-for-like baseline, `single_joined_bleu`, scores the single-sentence
translations joined n to a line after translation. Per row also the seconds the translation
took (pin the process to one core: `OMP_NUM_THREADS=1 taskset -c 1`) and the mean length of
the joined lines in source subwords.
`scripts/benchmark.py paragraphs` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled

from bench_machine import (  # noqa: E402
    load_average,
    print_markdown_table,
    run_standalone,
    usable_cores,
)

from transformer_mt.evaluation import corpus_scores  # noqa: E402
from transformer_mt.inference.line_settings import LineSettings  # noqa: E402
from transformer_mt.inference.paragraphs import joined, joined_bleu  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.text_files import read_lines  # noqa: E402

DEFAULT_DATA = REPO / "data" / "multi30k"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--src", type=Path, default=DEFAULT_DATA / "test2016.de")
    parser.add_argument("--ref", type=Path, default=DEFAULT_DATA / "test2016.en")
    parser.add_argument("--joins", type=int, nargs="+", default=[1, 2, 4, 8], metavar="N")
    parser.add_argument("--beam-size", type=int, help="default: the checkpoint's")


def run(args: argparse.Namespace) -> list[dict]:
    """One row per join and splitting setting."""
    sources, references = read_lines(args.src), read_lines(args.ref)
    changes = {} if args.beam_size is None else {"beam_size": args.beam_size}
    rows = []
    for split_sentences in (True, False):
        translator = Translator.from_checkpoint(
            str(args.checkpoint), **changes, lines=LineSettings(split_sentences=split_sentences)
        )
        single = [t.texts[0] for t in translator.translate(sources)] if split_sentences else []
        for n in args.joins:
            start = time.perf_counter()
            bleu, length = joined_bleu(translator, sources, references, n)
            row = {
                "bench": "paragraphs",
                "checkpoint": str(args.checkpoint),
                "join": n,
                "split": split_sentences,
                "bleu": bleu,
                "src_tokens": length,
                "lines": len(sources) // n,
                "seconds": round(time.perf_counter() - start, 1),
                "beam_size": translator.decode.beam_size,
                "cpus": usable_cores(),
                "load": load_average(),
            }
            if single:
                scores = corpus_scores(joined(single, n), joined(references, n), ["bleu"])
                row["single_joined_bleu"] = round(scores[0].score, 2)
            print(row, file=sys.stderr, flush=True)  # progress: a run takes minutes
            rows.append(row)
    return rows


def print_table(results: list[dict], file=sys.stdout) -> None:
    """BLEU per join, splitting on and off, and the distance to single sentences."""
    by_key = {(row["join"], row["split"]): row for row in results}
    single = by_key.get((1, True))
    headers = ["sentences a line", "lines", "source subwords", "BLEU split", "BLEU whole"]
    headers += ["single, joined after", "split - single", "split - single joined"]
    headers += ["seconds split", "seconds whole"]
    rows = []
    for n in sorted({row["join"] for row in results}):
        split, whole = by_key[n, True], by_key[n, False]
        gap = "-" if single is None else f"{split['bleu'] - single['bleu']:+.2f}"
        like = split["single_joined_bleu"]
        rows.append(
            [n, split["lines"], split["src_tokens"], split["bleu"], whole["bleu"], like, gap]
            + [f"{split['bleu'] - like:+.2f}", split["seconds"], whole["seconds"]]
        )
    print_markdown_table(headers, "r" * len(headers), rows, file)
    first = results[0]
    print(
        f"{first['checkpoint']}, beam {first['beam_size']}, {first['cpus']} core(s), "
        f"load {first['load']}",
        file=file,
    )


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
