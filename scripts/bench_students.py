"""Fast students: BLEU, chrF and sentences/s of checkpoints through our translator and
CTranslate2, each in float32 and int8: the fast students' table and plot (docs/distillation.md).

    python scripts/bench_students.py --checkpoints NAME=CKPT[@BEAM] [NAME=CKPT[@BEAM] ...]
        [--shortlists NAME=VMAP ...] [--data data/multi30k] [--batch-size 64] [--repeats 2]
        [--limit N]
        [--systems ours ours-int8 ct2 ct2-int8] [--length-norm average|checkpoint]
        [--max-len N] [--outputs DIR] [--plot PNG] [--threads 1]

For each checkpoint (`@BEAM`: at that beam size instead of its config's, e.g. `@1`, greedy,
the usual search of a distilled student), Multi30k test2016 (--data/test2016.SRC, references
test2016.TGT; --split valid for valid2016, which choices are tuned on; the first --limit lines)
is translated by four systems:

- `ours`: `Translator.from_checkpoint`, float32, as `tmt translate` loads it (packed layers
  unless slower);
- `ours-int8`: the same with `quantize="int8"` (`tmt translate --quantize int8`);
- `ct2`: the model exported to CTranslate2 (`export_ct2.build_spec`, through bench_translate's
  `_ct2_translator`), compute_type float32;
- `ct2-int8`: that model loaded with compute_type int8.

Every system gets the same input: the lines sorted by length in characters and cut into
chunks of --batch-size lines, each chunk one batch (our translator's token budget is lifted),
each line one sentence (test2016's lines are single captions: our sentence splitting is off,
CTranslate2 has none). A pass times the whole set, text in and text out: SentencePiece
encoding, search and decoding; a system's speed is the fastest of --repeats passes, the passes
of a checkpoint's systems taken in turns (bench_translate's `measure_in_turns`), on --threads
threads (pin the process too: `OMP_NUM_THREADS=1 taskset -c 1`).

Search settings are equal across the four systems of a checkpoint (bench_translate documents
the equivalence: `decode_config`, `_ct2`): the checkpoint's beam size; score = log P / |y|
(our `length_norm: average`, CTranslate2's length_penalty 1.0); PAD and BOS never generated;
one max length for every sentence, CTranslate2 taking one per call: --max-len, by default the
checkpoint's max_len rule (max_len_a * |x| + max_len_b) at the longest test source. Our
default GNMT penalty has no CTranslate2 counterpart (docs/deployment.md), so the checkpoint's
own `length_norm` and `length_penalty` are used only with `--length-norm checkpoint`, which
also keeps its per-sentence max length rule: our rows are then what `tmt translate` gives,
and the CTranslate2 rows are skipped with a note, as are those of a model CTranslate2 cannot
express (the exporter's refusal) or of one with language tags.

`--shortlists NAME=VMAP`: the checkpoint named NAME searches with that shortlist (`tmt
shortlist`) in every system: ours through `Translator.from_checkpoint(shortlist=...)`,
CTranslate2 with the file as the model's vocabulary map and `use_vmap=True`.

BLEU and chrF are sacrebleu's (`evaluation.corpus_scores`, detokenised output against the
references); parameters are the float32 model's. `--outputs DIR` writes each row's
translations to DIR/NAME.SYSTEM.TGT, line by line in test order.

Prints one JSON object per (checkpoint, system), then a Markdown table whose last column is
each row's speed over the first checkpoint's row of the same system. `--plot` draws BLEU
against sentences/s (log scale), a marker per system and a label per model (needs
matplotlib, the `plot` extra). `scripts/benchmark.py students` calls `add_arguments` and
`run` from here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402
from bench_machine import (  # noqa: E402
    machine_info,
    print_markdown_table,
    run_standalone,
    table_footer,
)
from bench_translate import _ct2, _ct2_translator, decode_config, measure_in_turns  # noqa: E402

from transformer_mt.artifacts import InferenceBundle, load_for_inference  # noqa: E402
from transformer_mt.config import DecodeConfig  # noqa: E402
from transformer_mt.data.specials import SpecialTokens  # noqa: E402
from transformer_mt.data.tokenizer import EOS_ID, PAD_ID, Tokenizer  # noqa: E402
from transformer_mt.errors import TmtError  # noqa: E402
from transformer_mt.evaluation import corpus_scores  # noqa: E402
from transformer_mt.inference.line_settings import LineSettings  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.machine import keep_freed_memory  # noqa: E402
from transformer_mt.search.lengths import max_output_lengths  # noqa: E402
from transformer_mt.text_files import read_lines  # noqa: E402

DEFAULT_DATA = REPO / "data" / "multi30k"
SYSTEMS = {
    "ours": "ours float32",
    "ours-int8": "ours int8",
    "ct2": "CTranslate2 float32",
    "ct2-int8": "CTranslate2 int8",
}
MARKERS = {"ours": "o", "ours-int8": "s", "ct2": "^", "ct2-int8": "D"}
# Translate = a chunk of lines in, their translations out (text to text).
Translate = Callable[[list[str]], list[str]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoints",
        nargs="+",
        required=True,
        metavar="NAME=CKPT[@BEAM]",
        help="the first: baseline; @BEAM: that beam size",
    )
    parser.add_argument(
        "--shortlists",
        nargs="+",
        default=[],
        metavar="NAME=VMAP",
        help="the checkpoint NAME searches with this shortlist in every system",
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of test2016")
    parser.add_argument("--split", default="test2016", help="file prefix in --data")
    parser.add_argument("--src-lang", default="de")
    parser.add_argument("--tgt-lang", default="en")
    parser.add_argument("--limit", type=int, help="the first N test sentences (default: all)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences a batch")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes; the best counts")
    parser.add_argument(
        "--systems", nargs="+", choices=list(SYSTEMS), default=list(SYSTEMS), metavar="SYSTEM"
    )
    parser.add_argument(
        "--length-norm",
        choices=["average", "checkpoint"],
        default="average",
        help="average: log P/|y| for all systems; checkpoint: its decode settings, no CT2 rows",
    )
    parser.add_argument("--max-len", type=int, help="output limit (default: the checkpoint's)")
    parser.add_argument("--threads", type=int, default=1, help="torch and CTranslate2 threads")
    parser.add_argument("--outputs", type=Path, help="write each row's translations here")
    parser.add_argument("--plot", type=Path, help="PNG of BLEU against sentences/s")


def parse_checkpoints(specs: list[str]) -> list[tuple[str, Path, int | None]]:
    """(NAME, PATH, beam size or None) of each NAME=PATH[@BEAM], names unique (they label
    rows, files and points)."""
    pairs = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        path, at, beam = path.rpartition("@") if "@" in path else (path, "", "")
        if not sep or not name or not path or (at and not beam.isdigit()) or beam == "0":
            raise SystemExit(f"--checkpoints {spec!r}: give NAME=PATH or NAME=PATH@BEAM")
        pairs.append((name, Path(path), int(beam) if beam else None))
    names = [name for name, _, _ in pairs]
    if len(set(names)) != len(names):
        raise SystemExit(f"--checkpoints: names must differ, got {' '.join(names)}")
    return pairs


def parse_shortlists(specs: list[str], names: list[str]) -> dict[str, Path]:
    """NAME -> shortlist file of each NAME=VMAP, NAME one of the checkpoints' `names`."""
    shortlists = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not path or name not in names:
            raise SystemExit(f"--shortlists {spec!r}: give NAME=VMAP, NAME one of {names}")
        shortlists[name] = Path(path)
    return shortlists


def run(args: argparse.Namespace) -> list[dict]:
    """One row per (checkpoint, system): measured, or skipped with the reason."""
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as `tmt translate` does
    sources = read_lines(args.data / f"{args.split}.{args.src_lang}")[: args.limit]
    references = read_lines(args.data / f"{args.split}.{args.tgt_lang}")[: args.limit]
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    chunks = [
        [sources[i] for i in order[start : start + args.batch_size]]
        for start in range(0, len(order), args.batch_size)
    ]
    machine = machine_info()
    rows = []
    checkpoints = parse_checkpoints(args.checkpoints)
    shortlists = parse_shortlists(args.shortlists, [name for name, _, _ in checkpoints])
    for name, path, beam in checkpoints:
        bundle = load_for_inference(str(path), torch.device("cpu"))
        configured = bundle.config.decode
        if beam is not None:
            configured = dataclasses.replace(configured, beam_size=beam)
        decode = search_settings(configured, bundle, sources, args)
        shortlist = shortlists.get(name)
        translates, skipped = systems(path, bundle, decode, args.systems, shortlist)
        measured = measure_in_turns(translates, chunks, args.repeats)
        for system in args.systems:
            row = {"bench": "students", "name": name, "system": system, "checkpoint": str(path)}
            if system in skipped:
                row["skipped"] = skipped[system]
                print(f"bench_students: {name} {system} skipped: {row['skipped']}", file=sys.stderr)
            else:
                speed, outputs = measured[system]
                hypotheses = [""] * len(sources)
                for i, text in zip(order, outputs, strict=True):
                    hypotheses[i] = text
                row.update(measured_row(speed, hypotheses, references))
                write_outputs(args.outputs, f"{name}.{system}.{args.tgt_lang}", hypotheses)
            row.update(settings_row(bundle, decode, args.batch_size), **machine)
            row["shortlist"] = None if shortlist is None else str(shortlist)
            row["split"] = args.split
            print(json.dumps(row), file=sys.stderr, flush=True)  # progress
            rows.append(row)
    add_relative_speed(rows)
    if args.plot:
        plot(rows, args.plot)
    return rows


def search_settings(
    decode: DecodeConfig, bundle: InferenceBundle, sources: list[str], args: argparse.Namespace
) -> DecodeConfig:
    """The settings every system of one checkpoint searches with (see the module): one
    hypothesis, one batch per chunk, and with --length-norm average bench_translate's
    equivalent settings at the checkpoint's beam size."""
    if args.length_norm == "checkpoint":
        return dataclasses.replace(decode, n_best=1, sampling=False, max_tokens=10**9)
    max_len = args.max_len
    if max_len is None:
        longest = max(len(bundle.src_tokenizer.encode(line)) for line in sources) + 1  # EOS
        src_mask = torch.ones(1, 1, 1, longest, dtype=torch.bool)
        max_len = int(max_output_lengths(src_mask, decode, bundle.model.cfg.max_positions)[0])
    settings = argparse.Namespace(fixed_length=None, max_len=max_len)
    return dataclasses.replace(decode_config(decode.beam_size, settings), max_tokens=10**9)


def ct2_refusal(decode: DecodeConfig, specials: SpecialTokens) -> str | None:
    """Why CTranslate2 cannot search as `decode` says (None: it can, through `_ct2`)."""
    if specials != SpecialTokens():
        return "a model with language tags or imported specials (the CT2 rows feed our own ids)"
    if decode.length_norm != "average":
        return (
            f"length_norm {decode.length_norm} (penalty {decode.length_penalty:g}): CTranslate2 "
            "divides by |y|^penalty only; --length-norm average runs every system alike"
        )
    if decode.max_len_a != 0 or decode.min_len != 1:
        return "a per-sentence max length: CTranslate2 takes one per call"
    return None


def systems(
    path: Path,
    bundle: InferenceBundle,
    decode: DecodeConfig,
    names: list[str],
    shortlist: Path | None = None,
) -> tuple[dict[str, Translate], dict[str, str]]:
    """The translate function of each system in `names` that can run (with `shortlist`, a
    vocabulary map file, or none), and the reason for each that cannot."""
    translates: dict[str, Translate] = {}
    skipped: dict[str, str] = {}
    changes = {f.name: getattr(decode, f.name) for f in dataclasses.fields(decode)}
    for name in names:
        try:
            if name in ("ours", "ours-int8"):
                quantize = "int8" if name == "ours-int8" else None
                translator = Translator.from_checkpoint(
                    str(path),
                    quantize=quantize,
                    shortlist=shortlist,
                    **changes,
                    lines=LineSettings(split_sentences=False),
                )
                translates[name] = _ours(translator)
            else:
                refusal = ct2_refusal(decode, bundle.specials)
                if refusal is not None:
                    raise TmtError(refusal)
                model, src, tgt = bundle.model, bundle.src_tokenizer, bundle.tgt_tokenizer
                cpu = torch.device("cpu")
                engine = _ct2_translator(model, src, tgt, name, cpu, shortlist)
                translates[name] = _ct2_text(engine, src, tgt, decode, shortlist is not None)
        except (ImportError, TmtError, RuntimeError, ValueError) as err:
            skipped[name] = str(err)
    return translates, skipped


def _ours(translator: Translator) -> Translate:
    def translate(lines: list[str]) -> list[str]:
        return [translation.texts[0] for translation in translator.translate(lines)]

    return translate


def _ct2_text(
    engine, src: Tokenizer, tgt: Tokenizer, decode: DecodeConfig, use_vmap: bool = False
) -> Translate:
    """bench_translate's CTranslate2 search (`_ct2`) with text in and out: SentencePiece
    encoding, EOS and padding as our batches have them, decoding of the best hypothesis;
    `use_vmap`: with the model's vocabulary map."""
    settings = argparse.Namespace(fixed_length=None, max_len=decode.max_len_b)
    search_ids = _ct2(engine, src, tgt, decode.beam_size, settings, use_vmap)

    def translate(lines: list[str]) -> list[str]:
        rows = [torch.tensor(src.encode(line) + [EOS_ID]) for line in lines]
        src_ids = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=PAD_ID)
        return [tgt.decode(ids) for ids in search_ids(src_ids)]

    return translate


def measured_row(speed: dict, hypotheses: list[str], references: list[str]) -> dict:
    """BLEU and chrF of `hypotheses` (in test order), and the speed `measure_in_turns` gave."""
    bleu, chrf = corpus_scores(hypotheses, references, ["bleu", "chrf"])
    # `measure_in_turns` counts tokens as its outputs' lengths: here characters.
    speed = {k: v for k, v in speed.items() if k not in ("tgt_tokens", "tok_per_s")}
    scores = {"bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2)}
    return {**scores, "bleu_signature": bleu.signature, **speed}


def settings_row(bundle: InferenceBundle, decode: DecodeConfig, batch_size: int) -> dict:
    """The model's size and the search settings, for every row of a checkpoint."""
    return {
        "parameters": sum(p.numel() for p in bundle.model.parameters()),  # float32, unpacked
        "beam_size": decode.beam_size,
        "length_norm": decode.length_norm,
        "length_penalty": decode.length_penalty,
        "max_len": _max_len_rule(decode),
        "batch_size": batch_size,
    }


def write_outputs(folder: Path | None, name: str, hypotheses: list[str]) -> None:
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(line + "\n" for line in hypotheses), encoding="utf-8")


def _max_len_rule(decode: DecodeConfig) -> str:
    if decode.max_len_a == 0:
        return str(decode.max_len_b)
    return f"{decode.max_len_a:g}|x|+{decode.max_len_b}"


def add_relative_speed(rows: list[dict]) -> None:
    """`speed_vs_first`: sentences/s over the first checkpoint's row of the same system
    (None where either was skipped)."""
    first: dict[str, float | None] = {}
    for row in rows:
        first.setdefault(row["system"], row.get("sent_per_s"))
    for row in rows:
        base, mine = first[row["system"]], row.get("sent_per_s")
        row["speed_vs_first"] = round(mine / base, 2) if base and mine else None


def print_table(results: list[dict], file=sys.stdout) -> None:
    """A row per measured (checkpoint, system); skipped ones and the settings below."""
    if not results:
        return
    first = results[0]["name"]
    headers = ["model", "system", "parameters", "beam", "BLEU", "chrF", "sentences/s"]
    rows = [
        [r["name"], SYSTEMS[r["system"]], f"{r['parameters'] / 1e6:.2f}M", r["beam_size"]]
        + [r["bleu"], r["chrf"], r["sent_per_s"]]
        + ["-" if r["speed_vs_first"] is None else f"{r['speed_vs_first']:.2f}x"]
        for r in results
        if "skipped" not in r
    ]
    print_markdown_table([*headers, f"vs {first}"], "llrrrrrr", rows, file)
    for r in results:
        if "skipped" in r:
            print(f"skipped: {r['name']}, {SYSTEMS[r['system']]}: {r['skipped']}", file=file)
    measured = [r for r in results if "skipped" not in r] or results
    r = measured[0]
    sentences = f"{r['sentences']} sentences" if "sentences" in r else "no rows measured"
    norm = "log P/|y|" if r["length_norm"] == "average" else "the checkpoint's length norm"
    print(
        f"{r.get('split', 'test2016')}, {sentences}, batches of {r['batch_size']}, "
        "beam as configured (or @BEAM), "
        f"{norm}, "
        f"max length {r['max_len']}, best of {r.get('repeats', '-')} pass(es); " + table_footer(r),
        file=file,
    )


def plot(rows: list[dict], path: Path) -> None:
    """BLEU against sentences/s (log scale): a colour per model, joined by a line through its
    systems, and a marker per system, each in a legend of its own (labels beside the points
    overlap where models are close)."""
    try:
        import matplotlib
    except ImportError:
        print(
            f"bench_students: no plot written to {path}: matplotlib is missing "
            "(pip install 'transformer_mt[plot]')",
            file=sys.stderr,
        )
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, NullFormatter

    figure, ax = plt.subplots(figsize=(8, 5))
    measured = [r for r in rows if "skipped" not in r]
    names = list(dict.fromkeys(r["name"] for r in measured))
    colours = plt.get_cmap("tab10")
    model_handles = []
    for k, name in enumerate(names):
        mine = sorted((r for r in measured if r["name"] == name), key=lambda r: r["sent_per_s"])
        colour = colours(k % 10)
        ax.plot([r["sent_per_s"] for r in mine], [r["bleu"] for r in mine], "-", color=colour,
                alpha=0.35, linewidth=1)  # fmt: skip
        for r in mine:
            ax.plot(r["sent_per_s"], r["bleu"], MARKERS[r["system"]], color=colour, markersize=7)
        model_handles.append(Line2D([], [], color=colour, marker="o", linestyle="-", label=name))
    system_handles = [
        Line2D([], [], color="black", marker=MARKERS[system], linestyle="", label=label)
        for system, label in SYSTEMS.items()
        if any(r["system"] == system for r in measured)
    ]
    ax.set(xscale="log", xlabel="sentences/s (log scale)", ylabel="BLEU")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))  # 100, not 10^2
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks([t for t in (100, 200, 300, 500, 1000, 2000) if _within(t, measured)])
    ax.grid(alpha=0.3, which="both")
    models = ax.legend(handles=model_handles, title="model", fontsize=7, title_fontsize=8,
                       loc="upper left", bbox_to_anchor=(1.01, 1.0))  # fmt: skip
    ax.add_artist(models)
    ax.legend(handles=system_handles, title="system", fontsize=7, title_fontsize=8,
              loc="lower left", bbox_to_anchor=(1.01, 0.0))  # fmt: skip
    if measured:
        r = measured[0]
        ax.set_title(f"{r.get('split', 'test2016')}, batch {r['batch_size']}; {table_footer(r)}",
                     fontsize=7)  # fmt: skip
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # bbox "tight" takes in the legends outside the axes; the added one must be named.
    figure.savefig(path, dpi=120, bbox_inches="tight", bbox_extra_artists=[models])
    plt.close(figure)


def _within(tick: float, rows: list[dict]) -> bool:
    """Whether `tick` lies in the speeds plotted, with a margin of half a tick."""
    speeds = [r["sent_per_s"] for r in rows] or [tick]
    return min(speeds) / 1.5 <= tick <= max(speeds) * 1.5


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
