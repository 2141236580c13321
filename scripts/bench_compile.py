"""Milliseconds per decoding step of one checkpoint's model: eager against torch.compile.

    python scripts/bench_compile.py --checkpoint CKPT [--input FILE] [--sentences 64]
        [--fixed-length 20] [--beams 1 5] [--repeats 5] [--threads 1]
        [--variants eager-plain eager-packed compiled compiled-cpp compiled-static compiled-packed]

The first --sentences lines of --input (default data/multi30k/test2016.<the checkpoint's source
language>) become one batch as `tmt translate` makes them (`LineEncoding.source_ids`, then
`make_source_batches` with the checkpoint's special ids), and every variant searches that
batch with `search` and `search_options`, each search writing exactly --fixed-length tokens
(min_len = max_len_b = N, max_len_a = 0; score log P / |y|). The variants (`VARIANTS`):

    eager-plain      the model as loaded, plain `nn.Linear` layers
    eager-packed     our packed linear layers (`pack_where_it_pays`): what `tmt translate` runs
    compiled         torch.compile(decode_step, dynamic=True, options={"freezing": True})
    compiled-cpp     the same with "cpp_wrapper": True
    compiled-static  dynamic=False with freezing: a graph per (rows, cache length), the
                     recompile limits raised so that all of them fit
    compiled-packed  dynamic=True of the packed model

Each variant works on a fresh copy of the loaded model (a packed model cannot be deep-copied,
so the packed variants pack their own copy). Its first search per beam size (compilation and
first runs) is timed as `compile_s`; then each beam size is searched --repeats times and the
min and median of a search's wall time divided by N are the ms a step. Compiled rows count
dynamo's graph breaks and unique graphs, and every row says whether its best hypotheses equal
eager-plain's. A variant whose compilation raises becomes one row with the error's first line,
and the run goes on. `scripts/benchmark.py compile` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
from bench_machine import load_average, machine_info, run_standalone, table_footer  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from transformer_mt.artifacts import InferenceBundle, load_for_inference  # noqa: E402
from transformer_mt.config import DecodeConfig  # noqa: E402
from transformer_mt.data.batching import SourceBatch  # noqa: E402
from transformer_mt.data.specials import SpecialTokens  # noqa: E402
from transformer_mt.inference.packed import pack_where_it_pays  # noqa: E402
from transformer_mt.inference.running import search_options  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.model import Seq2SeqTransformer  # noqa: E402
from transformer_mt.search import search  # noqa: E402
from transformer_mt.text_files import read_lines  # noqa: E402

DEFAULT_DATA = REPO / "data" / "multi30k"


@dataclass(frozen=True)
class Variant:
    """How a variant's model is made from the loaded one."""

    packed: bool  # linear layers packed by `pack_where_it_pays`, as `tmt translate` runs them
    compiled: bool  # decode_step through torch.compile
    dynamic: bool = True  # torch.compile's `dynamic`
    options: dict = field(default_factory=dict)  # torch.compile's inductor `options`


VARIANTS = {
    "eager-plain": Variant(packed=False, compiled=False),
    "eager-packed": Variant(packed=True, compiled=False),
    "compiled": Variant(packed=False, compiled=True, options={"freezing": True}),
    "compiled-cpp": Variant(
        packed=False, compiled=True, options={"freezing": True, "cpp_wrapper": True}
    ),
    "compiled-static": Variant(
        packed=False, compiled=True, dynamic=False, options={"freezing": True}
    ),
    "compiled-packed": Variant(packed=True, compiled=True),
}
DEFAULT_VARIANTS = ["eager-plain", "eager-packed", "compiled"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="the model to time")
    parser.add_argument(
        "--input",
        type=Path,
        help="source sentences (default: data/multi30k/test2016.<checkpoint's src_lang>)",
    )
    parser.add_argument("--sentences", type=int, default=64, help="first N lines: one batch")
    parser.add_argument("--fixed-length", type=int, default=20, help="tokens every search writes")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5], help="1: greedy")
    parser.add_argument("--repeats", type=int, default=5, help="timed searches per beam size")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--variants", nargs="+", choices=list(VARIANTS), default=DEFAULT_VARIANTS,
        metavar="VARIANT", help=f"any of {', '.join(VARIANTS)}",
    )  # fmt: skip


def run(args: argparse.Namespace) -> list[dict]:
    """One dict per (variant, beam size); a variant that failed to compile has one dict, with
    `error`."""
    torch.set_num_threads(args.threads)
    bundle = load_for_inference(args.checkpoint, torch.device("cpu"))
    batch = source_batch(bundle, args.input, args.sentences)
    plain = bundle.model.eval()
    machine = machine_info()
    about = {"sentences": len(batch.src_ids), "fixed_length": args.fixed_length,
             "model": str(args.checkpoint)}  # fmt: skip
    results = []
    with torch.inference_mode():
        reference = {beam: best_tokens(plain, batch, bundle.specials, beam, args.fixed_length)
                     for beam in args.beams}  # fmt: skip
        for name in sorted(set(args.variants), key=list(VARIANTS).index):
            for row in measure_variant(name, plain, batch, bundle.specials, reference, args):
                row = {"bench": "compile", "variant": name, **row, **about, **machine}
                print(json.dumps(row), file=sys.stderr, flush=True)  # progress
                results.append(row)
    return results


# --- inputs and models ----------------------------------------------------------------------


def source_batch(bundle: InferenceBundle, path: Path | None, sentences: int) -> SourceBatch:
    """The first `sentences` non-blank lines of `path` as one batch, encoded, cut and padded
    as `tmt translate` does it, with the checkpoint's special ids."""
    path = path or DEFAULT_DATA / f"test2016.{bundle.config.data.src_lang}"
    tokenizers = (bundle.src_tokenizer, bundle.tgt_tokenizer)
    translator = Translator(bundle.model, tokenizers, decode_config(1, 1), specials=bundle.specials)
    encoded = [translator.encoding.source_ids(line) for line in read_lines(path)]
    sources = [ids for ids in encoded if ids][:sentences]
    if not sources:
        raise SystemExit(f"bench_compile: {path} has no sentences")
    budget = len(sources) * (max(len(ids) for ids in sources) + 1)  # B * S, EOS counted
    (batch,) = translator.batches(sources, max_tokens=budget)
    return batch


def decode_config(beam_size: int, length: int) -> DecodeConfig:
    """Exactly `length` tokens for every sentence; score = log P / |y|."""
    return DecodeConfig(
        beam_size=beam_size,
        length_penalty=1.0,
        length_norm="average",
        max_len_a=0.0,
        max_len_b=length,
        min_len=length,
    )


def build(variant: Variant, plain: Seq2SeqTransformer) -> Seq2SeqTransformer:
    """A fresh copy of `plain` made as `variant` says. torch.compile is lazy: this returns at
    once and the first searches compile."""
    model = copy.deepcopy(plain)
    if variant.packed:
        pack_where_it_pays(model)
    if variant.compiled:
        model.decode_step = torch.compile(
            model.decode_step, dynamic=variant.dynamic, options=variant.options
        )
    return model


def recompile_limit(beams: list[int], length: int) -> int:
    """Graphs a static-shape decode_step may need: one per (rows, cache length), rows being a
    beam size's row count or, on a first step, possibly another (at least dynamo's default)."""
    return max(torch._dynamo.config.recompile_limit, 2 * len(beams) * length)


# --- measuring ------------------------------------------------------------------------------


def best_tokens(
    model: Seq2SeqTransformer,
    batch: SourceBatch,
    specials: SpecialTokens,
    beam_size: int,
    length: int,
) -> list[list[int]]:
    """The best hypothesis of every row of `batch`."""
    cfg = decode_config(beam_size, length)
    found = search(model, batch.src_ids, batch.src_mask, cfg, search_options(model, specials))
    return [result.best.tokens for result in found]


def measure_variant(
    name: str,
    plain: Seq2SeqTransformer,
    batch: SourceBatch,
    specials: SpecialTokens,
    reference: dict[int, list[list[int]]],
    args: argparse.Namespace,
) -> list[dict]:
    """Build `name`, search once per beam size (compile_s), then time each beam size."""
    variant = VARIANTS[name]
    torch._dynamo.reset()  # no graphs of the variant before
    counters.clear()
    limit = recompile_limit(args.beams, args.fixed_length)
    limits = {"recompile_limit": limit, "cache_size_limit": limit,
              "accumulated_recompile_limit": max(limit, 256)}  # fmt: skip
    with torch._dynamo.config.patch(**limits):
        try:
            model = build(variant, plain)
            start = time.perf_counter()
            for beam in args.beams:
                best_tokens(model, batch, specials, beam, args.fixed_length)
        except Exception as err:  # compilation: report it and go on with the next variant
            if not variant.compiled:
                raise
            lines = str(err).strip().splitlines()
            error = f"{type(err).__name__}: {lines[0] if lines else ''}".strip()
            print(f"bench_compile: {name} failed: {error}", file=sys.stderr, flush=True)
            return [{"beam": None, "error": error}]
        compile_s = time.perf_counter() - start
        rows = [time_searches(model, batch, specials, beam, args) for beam in args.beams]
    graphs = {"graph_breaks": None, "graph_break_reasons": None, "graphs": None}
    if variant.compiled:
        graphs = {
            "graph_breaks": sum(counters["graph_break"].values()),
            "graph_break_reasons": dict(counters["graph_break"]),
            "graphs": counters["stats"]["unique_graphs"],
        }
    for row in rows:
        row["same_as_eager"] = row.pop("tokens") == reference[row["beam"]]
        row.update(compile_s=round(compile_s, 2), **graphs)
    return rows


def time_searches(
    model: Seq2SeqTransformer,
    batch: SourceBatch,
    specials: SpecialTokens,
    beam_size: int,
    args: argparse.Namespace,
) -> dict:
    """Min and median ms a step over `args.repeats` searches, and the last one's hypotheses."""
    cfg = decode_config(beam_size, args.fixed_length)
    options = search_options(model, specials)
    load = load_average()
    ms = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        found = search(model, batch.src_ids, batch.src_mask, cfg, options)
        ms.append((time.perf_counter() - start) / args.fixed_length * 1000)
    return {
        "beam": beam_size,
        "min_ms": round(min(ms), 2),
        "median_ms": round(statistics.median(ms), 2),
        "repeats": args.repeats,
        "load_before": load,
        "tokens": [result.best.tokens for result in found],
    }


def print_table(results: list[dict], file=sys.stderr) -> None:
    print(
        f"{'variant':<17}{'beam':>5}{'min ms':>9}{'median ms':>11}{'compile s':>11}"
        f"{'breaks':>8}{'graphs':>8}{'= eager':>9}{'load':>6}",
        file=file,
    )

    def cell(value: object) -> str:
        return "-" if value is None else str(value)

    for r in results:
        if "error" in r:
            print(f"{r['variant']:<17}{'-':>5}  failed: {r['error']}", file=file)
            continue
        same = "yes" if r["same_as_eager"] else "no"
        print(
            f"{r['variant']:<17}{r['beam']:>5}{r['min_ms']:>9}{r['median_ms']:>11}"
            f"{r['compile_s']:>11}{cell(r['graph_breaks']):>8}{cell(r['graphs']):>8}"
            f"{same:>9}{r['load_before']:>6}",
            file=file,
        )
    if results:
        r = results[0]
        print(
            f"{r['model']}, {r['sentences']} sentences, fixed length {r['fixed_length']}, "
            f"ms a step (min / median of the searches), {table_footer(r)}",
            file=file,
        )


if __name__ == "__main__":
    run_standalone(__doc__, add_arguments, run, print_table)
