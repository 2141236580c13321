"""How translation time grows with source length and beam size: ours against CTranslate2.

    python scripts/bench_growth.py [--lengths 10 20 40 80 160] [--beams 1 2 5 10] \
        [--length-at 20] [--beam-at 5] [--systems ours ct2] [--plot docs/translation-growth.png]

Two sweeps over the same random-weight quickstart model (or --checkpoint), as bench_translate
builds it for every system: source length at beam `--beam-at`, and beam size at source length
`--length-at`. The sources are `--sentences` random token sequences of exactly that length
(plus EOS), in batches of `--batch-size`, and every system is made to write exactly as many
target tokens as the source has (bench_translate's --fixed-length), so that the work is the
same for all and grows with the length as translation's does. Reported: milliseconds per
sentence (best of --repeats); with --plot, both sweeps on log-log axes (needs matplotlib).
`scripts/benchmark.py growth` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402
from bench_machine import machine_info, run_standalone, table_footer  # noqa: E402
from bench_translate import DEFAULT_DATA, engines, load_model, measure_in_turns  # noqa: E402

from transformer_mt.data.tokenizer import EOS_ID  # noqa: E402

FIRST_TOKEN = 4  # ids below are PAD, UNK, BOS, EOS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 20, 40, 80, 160])
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 2, 5, 10])
    parser.add_argument("--length-at", type=int, default=20, help="length of the beam sweep")
    parser.add_argument("--beam-at", type=int, default=5, help="beam of the length sweep")
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2, help="timed passes; best is kept")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--systems", nargs="+", default=["ours", "ct2"])
    parser.add_argument("--plot", type=Path, help="write both sweeps to this PNG")
    parser.add_argument("--checkpoint", help="a trained model (default: random quickstart weights)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="tokenizer training text")
    parser.add_argument("--src-lang", default="de")
    parser.add_argument("--tgt-lang", default="en")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=1)


def run(args: argparse.Namespace) -> list[dict]:
    torch.set_num_threads(args.threads)
    model, src_tokenizer, tgt_tokenizer = load_model(args)
    systems = engines(args.systems, model, src_tokenizer, tgt_tokenizer, torch.device("cpu"))
    points = [("length", length, args.beam_at) for length in args.lengths]
    points += [("beam", args.length_at, beam) for beam in args.beams]
    machine = machine_info()
    results = []
    for sweep, length, beam in points:
        batches = _random_batches(args, length, src_tokenizer.vocab_size)
        point = argparse.Namespace(**vars(args), fixed_length=length, max_len=length)
        translates = {name: make(beam, point) for name, make in systems.items()}
        for system, (row, _) in measure_in_turns(translates, batches, args.repeats).items():
            row = {
                "bench": "growth",
                "sweep": sweep,
                "system": system,
                "length": length,
                "beam": beam,
                "ms_per_sentence": round(1000 * row["best_s"] / row["sentences"], 2),
                **row,
                "model": args.checkpoint or "random-quickstart",
                **machine,
            }
            print(json.dumps(row), file=sys.stderr, flush=True)  # progress
            results.append(row)
    if args.plot:
        plot(results, args.plot)
    return results


def _random_batches(args: argparse.Namespace, length: int, vocab_size: int) -> list[torch.Tensor]:
    """`args.sentences` sources of `length` random tokens and EOS, the same for every system."""
    generator = torch.Generator().manual_seed(args.seed + length)
    ids = torch.randint(FIRST_TOKEN, vocab_size, (args.sentences, length), generator=generator)
    ids = torch.cat([ids, torch.full((args.sentences, 1), EOS_ID)], dim=1)
    return list(ids.split(args.batch_size))


def plot(results: list[dict], path: Path) -> None:
    """Milliseconds per sentence against length and against beam size, a line per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    labels = {"length": "source length (tokens)", "beam": "beam size"}
    for ax, (sweep, label) in zip(axes, labels.items(), strict=True):
        rows = [r for r in results if r["sweep"] == sweep]
        for system in dict.fromkeys(r["system"] for r in rows):
            mine = [r for r in rows if r["system"] == system]
            ax.plot([r[sweep] for r in mine], [r["ms_per_sentence"] for r in mine], "o-",
                    label=system)  # fmt: skip
        fixed = f"beam {rows[0]['beam']}" if sweep == "length" else f"length {rows[0]['length']}"
        ax.set(xscale="log", yscale="log", xlabel=label, ylabel="ms per sentence", title=fixed)
        ax.set_xticks([r[sweep] for r in rows], [str(r[sweep]) for r in rows])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.legend()
    if results:
        figure.suptitle(table_footer(results[0]), fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def print_table(results: list[dict], file=sys.stderr) -> None:
    systems = list(dict.fromkeys(r["system"] for r in results))
    times = {(r["sweep"], r["length"], r["beam"], r["system"]): r for r in results}
    ratio = "ours / ct2 time" if {"ours", "ct2"} <= set(systems) else ""
    print(f"| sweep | length | beam | {' | '.join(systems)} (ms/sentence) | {ratio} |", file=file)
    print("|---|---:|---:|" + "---:|" * len(systems) + "---:|", file=file)
    for sweep, length, beam in dict.fromkeys(k[:3] for k in times):
        cells = [str(times[(sweep, length, beam, s)]["ms_per_sentence"]) for s in systems]
        both = [times.get((sweep, length, beam, s)) for s in ("ours", "ct2")]
        share = f"{both[0]['best_s'] / both[1]['best_s']:.2f}" if all(both) else ""
        print(f"| {sweep} | {length} | {beam} | {' | '.join(cells)} | {share} |", file=file)
    if results:
        print(f"{results[0]['model']}, {table_footer(results[0])}", file=file)


if __name__ == "__main__":
    run_standalone(__doc__, add_arguments, run, print_table)
