"""Translation speed: our search vs HF `generate` and CTranslate2, same weights and inputs.

    python scripts/bench_translate.py [--fixed-length 20] [--beams 5 1] [--batch-sizes 32 64]
                                      [--checkpoint CKPT] [--repeats 3] [--threads 2]
                                      [--systems ours ours-int8 ours-bf16 hf ct2 ct2-int8]
                                      [--device cuda] [--top-k K]

Multi30k test2016 (1,000 German sentences) is tokenized with a joint 8k SentencePiece model
trained on Multi30k train (or the checkpoint's tokenizer), EOS appended and padded with 0 as our
batches are, sorted longest first and cut into batches of a fixed number of sentences. Both
systems get the same id tensors (CTranslate2 their pieces, without the EOS it appends itself).
Without --checkpoint the model has random weights of the quickstart size; HF gets them through
`to_marian`, CTranslate2 through our exporter (`export_ct2.build_spec`, float32; `ct2-int8`
loads that model with compute_type int8). `ours-int8` and `ours-bf16` are `tmt translate
--quantize int8`'s and `--quantize bf16`'s models (`quantize_int8`, `quantize_bf16`; bf16 only
where the CPU computes bfloat16 natively). Systems whose package is missing, or that cannot
express the model (HF Marian: rotary positions; CTranslate2: e.g. latent attention), are
skipped with a note.

The search settings are made equivalent (see `decode_config` and `hf_generation_config`): K
beams, a sentence stops at K finished hypotheses (HF early_stopping=True), score = log P / |y|
(our length_norm average, HF length_penalty 1.0), PAD and BOS never generated, EOS forbidden
before min_len tokens, and one max length for every sentence (max_len_a = 0), because HF has no
per-sentence limit. With --fixed-length N both generate exactly N tokens, so that random-weight
models do equal work. `agreement` is the share of sentences whose best hypotheses are identical
to ours. CTranslate2 masks PAD, BOS and early EOS before the softmax (renormalising) where we
mask after it (see docs/deployment.md), so with random weights and a forced length its beams
may rank differently; with a trained model those tokens carry ~no probability.

With --top-k K ours samples instead, among each row's K best tokens (`--beams`: samples per
sentence), timing the sampler; no other system runs (their draws differ).

Prints one JSON object per (system, beam, batch size), then a table. `scripts/benchmark.py
translate` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402
from bench_machine import (  # noqa: E402
    load_average,
    machine_info,
    pick_device,
    run_standalone,
    table_footer,
    usable_cores,
)

from transformer_mt import kernels  # noqa: E402
from transformer_mt.artifacts import load_for_inference  # noqa: E402
from transformer_mt.config import DecodeConfig, ModelConfig, TokenizerConfig  # noqa: E402
from transformer_mt.data.specials import SpecialTokens  # noqa: E402
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer  # noqa: E402
from transformer_mt.data.tokenizer_training import train_tokenizers  # noqa: E402
from transformer_mt.errors import TmtError  # noqa: E402
from transformer_mt.inference.packed import pack_where_it_pays  # noqa: E402
from transformer_mt.inference.quantize import (  # noqa: E402
    bf16_refusal,
    int8_cache_dtype,
    quantize_bf16,
    quantize_int8,
)
from transformer_mt.inference.running import search_options  # noqa: E402
from transformer_mt.machine import OtherWork, allowed_cores, keep_freed_memory  # noqa: E402
from transformer_mt.model import Seq2SeqTransformer, build_model  # noqa: E402
from transformer_mt.search import search  # noqa: E402
from transformer_mt.text_files import read_lines  # noqa: E402

DEFAULT_DATA = REPO / "data" / "multi30k"
# configs/quickstart-like: what a laptop trains on Multi30k.
QUICKSTART = ModelConfig(d_model=256, n_heads=4, n_layers=3, d_ff=1024)
SYSTEMS = ["ours", "ours-int8", "ours-bf16", "hf", "ct2", "ct2-int8"]
# Other processes' share of the run's cores (`machine.OtherWork`) from which the table says its
# wall times are not a quiet machine's: a tenth of a core's time (a run pinned to a quiet core
# showed 0.0, also with the other core busy; one sharing its core with a busy loop, 0.5). Lower
# than `machine.BUSY_SHARE`, which decides whether a core is left to other work.
SHARED_FROM = 0.1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of train/test2016")
    parser.add_argument("--src-lang", default="de")
    parser.add_argument("--tgt-lang", default="en")
    parser.add_argument("--checkpoint", help="a trained model (default: random quickstart weights)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--beams", type=int, nargs="+", default=[5, 1], help="1: greedy")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 64], help="sentences")
    parser.add_argument("--fixed-length", type=int, help="force exactly N output tokens")
    parser.add_argument("--max-len", type=int, default=64, help="output limit (no --fixed-length)")
    parser.add_argument("--sentences", type=int, default=None, help="first N test sentences")
    parser.add_argument(
        "--systems", nargs="+", choices=SYSTEMS, default=["ours", "hf", "ct2"], metavar="SYSTEM"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed passes; best is kept")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: auto")
    parser.add_argument(
        "--top-k",
        type=int,
        help="ours only: sample among the K best tokens, --beams samples per sentence",
    )


def run(args: argparse.Namespace) -> list[dict]:
    """One dict per (system, beam size, batch size); rows other than ours carry the agreement
    rate with ours."""
    if args.top_k is not None and set(args.systems) != {"ours"}:
        raise TmtError("--top-k: sampling is timed for --systems ours only (draws differ)")
    torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    model, src_tokenizer, tgt_tokenizer = load_model(args)
    lines = read_lines(args.data / f"test2016.{args.src_lang}")[: args.sentences]
    sources = [src_tokenizer.encode(line) + [EOS_ID] for line in lines]
    machine = machine_info()
    # The other systems are built from the CPU model; then every system and batch sits on `device`.
    systems = engines(args.systems, model, src_tokenizer, tgt_tokenizer, device)
    model.to(device)
    results = []
    for beam_size in args.beams:
        for batch_size in args.batch_sizes:
            batches = [b.to(device) for b in make_batches(sources, batch_size)]
            translates = {name: make(beam_size, args) for name, make in systems.items()}
            measured = measure_in_turns(translates, batches, args.repeats)
            ours_out = measured["ours"][1] if "ours" in measured else None
            for system, (row, outputs) in measured.items():
                row = {"bench": "translate", "system": system, "beam": beam_size,
                       "batch": batch_size, **row}  # fmt: skip
                if system != "ours" and ours_out is not None:
                    row["agreement"] = round(_agreement(ours_out, outputs), 4)
                row.update(
                    fixed_length=args.fixed_length,
                    model=args.checkpoint or "random-quickstart",
                    device=str(device),
                    **machine,
                )
                print(json.dumps(row), file=sys.stderr, flush=True)  # progress
                results.append(row)
    return results


# --- inputs and models ----------------------------------------------------------------------


def load_model(
    args: argparse.Namespace, model_cfg: ModelConfig = QUICKSTART
) -> tuple[Seq2SeqTransformer, Tokenizer, Tokenizer]:
    """--checkpoint's model and tokenizers, else random `model_cfg` weights and a joint
    Multi30k tokenizer (source and target)."""
    if args.checkpoint:
        bundle = load_for_inference(args.checkpoint, torch.device("cpu"))
        if bundle.specials != SpecialTokens():
            # Every system here is fed this toolkit's ids (pad 0, bos 2, eos 3).
            raise SystemExit(f"{args.checkpoint}: an imported model; compare models trained here")
        return bundle.model.eval(), bundle.src_tokenizer, bundle.tgt_tokenizer
    train_src = read_lines(args.data / f"train.{args.src_lang}")
    train_tgt = read_lines(args.data / f"train.{args.tgt_lang}")
    cfg = TokenizerConfig(vocab_size=args.vocab_size, joint=True)
    # The tokenizer's name hashes text and settings: later runs reuse it instead of retraining.
    pair = train_tokenizers(cfg, train_src, train_tgt, REPO / "data" / "cache" / "bench_translate")
    torch.manual_seed(args.seed)
    vocab_sizes = (pair.src.vocab_size, pair.tgt.vocab_size)
    model = build_model(model_cfg, *vocab_sizes, PAD_ID, kernel=kernels.attention)
    return model.eval(), pair.src, pair.tgt


def make_batches(sources: list[list[int]], batch_size: int) -> list[torch.Tensor]:
    """Sort longest first (as `make_source_batches`) and pad groups of `batch_size` with PAD."""
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        rows = [torch.tensor(sources[i]) for i in order[start : start + batch_size]]
        batches.append(
            torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=PAD_ID)
        )
    return batches


def decode_config(beam_size: int, args: argparse.Namespace) -> DecodeConfig:
    """Our settings: score = log P / |y|, one max length for all, min_len = max_len if fixed;
    with --top-k, `beam_size` samples per sentence."""
    max_len = args.fixed_length or args.max_len
    sampling = {}
    top_k = getattr(args, "top_k", None)  # other benchmarks pass settings of their own
    if top_k is not None:
        sampling = dict(sampling=True, top_k=top_k, n_best=beam_size)
    return DecodeConfig(
        beam_size=beam_size,
        length_penalty=1.0,
        length_norm="average",
        max_len_a=0.0,
        max_len_b=max_len,
        min_len=args.fixed_length or 1,
        **sampling,
    )


def hf_generation_config(beam_size: int, args: argparse.Namespace):
    """HF settings equivalent to `decode_config` (see the module docstring)."""
    from transformers import GenerationConfig

    max_len = args.fixed_length or args.max_len
    return GenerationConfig(
        num_beams=beam_size,
        do_sample=False,
        # ours: a sentence is done at K finished hypotheses (HF warns about it for greedy)
        early_stopping=beam_size > 1,
        length_penalty=1.0,  # log P / |y|^1, |y| counting EOS: our length_norm average
        max_new_tokens=max_len,
        min_new_tokens=args.fixed_length or 1,
        bad_words_ids=[[PAD_ID], [BOS_ID]],  # ours never generates PAD or BOS
        decoder_start_token_id=BOS_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        num_return_sequences=1,
        use_cache=True,
    )


def engines(
    systems: list[str],
    model: Seq2SeqTransformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    device: torch.device,
) -> dict:
    """system -> make_translate(beam_size, args), for the systems that can run here; "ours"
    first, as the others are compared with it. A system that cannot run gets a note on stderr."""
    engines = {}
    for system in sorted(systems, key=SYSTEMS.index):
        try:
            if system == "ours":
                engines[system] = partial(ours_translate, as_translate_loads(model, device), None)
            elif system == "ours-int8":
                if device.type != "cpu":
                    raise RuntimeError("int8 linear layers run on the CPU only")
                engines[system] = partial(ours_translate, quantize_int8(model), int8_cache_dtype())
            elif system == "ours-bf16":
                if device.type != "cpu" or bf16_refusal() is not None:
                    raise RuntimeError(bf16_refusal() or "bfloat16 linear layers run on the CPU")
                engines[system] = partial(ours_translate, quantize_bf16(model), None)
            elif system == "hf":
                engines[system] = partial(_hf, _hf_model(model).to(device))
            else:
                ct2 = _ct2_translator(model, src_tokenizer, tgt_tokenizer, system, device)
                engines[system] = partial(_ct2, ct2, src_tokenizer, tgt_tokenizer)
        except (ImportError, TmtError, RuntimeError, ValueError) as err:
            print(f"bench_translate: skipping {system}: {err}", file=sys.stderr)
    return engines


def as_translate_loads(model: Seq2SeqTransformer, device: torch.device) -> Seq2SeqTransformer:
    """`model` as `Translator.from_checkpoint` prepares it: on the CPU, a copy with packed
    linear layers unless slower (the other systems read the original's weights)."""
    if device.type != "cpu":
        return model
    ours = copy.deepcopy(model)
    pack_where_it_pays(ours)
    return ours


def _hf_model(model: Seq2SeqTransformer):
    from transformer_mt.interop.hf_marian import to_marian

    hf_model = to_marian(model, BOS_ID, EOS_ID)
    # Marian's config forces EOS as the last token at max length; ours finishes such a
    # hypothesis as it is. A None in the GenerationConfig passed to generate() falls back to
    # the model's default, so the default itself has to go.
    hf_model.generation_config.forced_eos_token_id = None
    return hf_model


def _ct2_translator(
    model: Seq2SeqTransformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    system: str,
    device: torch.device,
    vmap: Path | None = None,
):
    """Our weights as a float32 CTranslate2 model in a temporary folder, loaded with the
    compute type `system` names (ct2: float32, ct2-int8: int8); `vmap`: its vocabulary map
    (a shortlist, used when the search asks with use_vmap)."""
    import ctranslate2

    from transformer_mt.interop.export_ct2 import build_spec

    with torch.no_grad():
        spec = build_spec(model, src_tokenizer, tgt_tokenizer)
    if vmap is not None:
        spec.register_vocabulary_mapping(str(vmap))
    spec.optimize()
    with tempfile.TemporaryDirectory() as folder:
        spec.save(folder)
        return ctranslate2.Translator(
            folder,
            device=device.type,
            compute_type="int8" if system == "ct2-int8" else "float32",
            inter_threads=1,
            intra_threads=torch.get_num_threads(),
        )


# --- the systems: (B, S) source ids -> best hypothesis per row, EOS kept if generated ---------


def ours_translate(
    model: Seq2SeqTransformer,
    cache_dtype: torch.dtype | None,
    beam_size: int,
    args: argparse.Namespace,
):
    """Our search as `tmt translate` runs it (`search_options`, and glibc keeping freed
    memory for reuse, process-wide from here on), on ready-made id batches."""
    keep_freed_memory()
    cfg = decode_config(beam_size, args)
    options = search_options(model, cache_dtype=cache_dtype)

    def translate(src_ids: torch.Tensor) -> list[list[int]]:
        src_mask = (src_ids != PAD_ID)[:, None, None, :]  # (B, 1, 1, S), True = real token
        found = search(model, src_ids, src_mask, cfg, options)
        return [r.best.tokens + [EOS_ID] * r.best.has_eos for r in found]

    return translate


def _hf(hf_model, beam_size: int, args: argparse.Namespace):
    generation_config = hf_generation_config(beam_size, args)

    def translate(src_ids: torch.Tensor) -> list[list[int]]:
        with torch.inference_mode():
            out = hf_model.generate(
                input_ids=src_ids,
                attention_mask=(src_ids != PAD_ID).long(),
                generation_config=generation_config,
            )
        hyps = []
        for row in out[:, 1:].tolist():  # drop the decoder start token
            hyps.append(row[: row.index(EOS_ID) + 1] if EOS_ID in row else row)
        return [[t for t in hyp if t != PAD_ID] for hyp in hyps]

    return translate


def _ct2(
    translator,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    beam_size: int,
    args,
    use_vmap: bool = False,
):
    cfg = decode_config(beam_size, args)
    pieces = [src_tokenizer.id_to_piece(i) for i in range(src_tokenizer.vocab_size)]
    ids = {tgt_tokenizer.id_to_piece(i): i for i in range(tgt_tokenizer.vocab_size)}
    never = [[tgt_tokenizer.id_to_piece(PAD_ID)], [tgt_tokenizer.id_to_piece(BOS_ID)]]

    def translate(src_ids: torch.Tensor) -> list[list[int]]:
        # CTranslate2 appends the source EOS itself (export: add_source_eos).
        batch = [[pieces[i] for i in row if i not in (PAD_ID, EOS_ID)] for row in src_ids.tolist()]
        found = translator.translate_batch(
            batch,
            beam_size=beam_size,
            length_penalty=1.0,  # log P / |y| with EOS: our length_norm average
            max_decoding_length=cfg.max_len_b,
            min_decoding_length=cfg.min_len,
            suppress_sequences=never,
            return_end_token=True,
            use_vmap=use_vmap,
        )
        return [[ids[p] for p in result.hypotheses[0]] for result in found]

    return translate


def measure(translate, batches: list[torch.Tensor], repeats: int) -> tuple[dict, list]:
    """`measure_in_turns` of one system."""
    return measure_in_turns({"": translate}, batches, repeats)[""]


def measure_in_turns(
    translates: dict, batches: list[torch.Tensor], repeats: int
) -> dict[str, tuple[dict, list]]:
    """Best-of-`repeats` wall time over all batches of each system (name -> translate),
    sentences/s and target tokens/s, and its outputs; with the best CPU time of the process
    (every thread's, CTranslate2's workers too), which a busy core changes far less than the
    wall time: four processes on one core had shown ours and CTranslate2 level (1.01x) where
    their CPU times differed by 1.5x.

    Each round runs every system once, in turn, so that a machine that slows down or speeds
    up for a while (a VM's neighbours: 10-20% on the 2-core VMs here) moves all of them alike
    rather than one system's rounds."""
    for translate in translates.values():
        translate(batches[0][:4])  # warm-up: first-call allocations and kernel choice
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in translates}
    loads: dict[str, float] = {}
    others: dict[str, list[float | None]] = {name: [] for name in translates}
    outputs: dict[str, list] = {}
    for _ in range(repeats):
        for name, translate in translates.items():
            loads.setdefault(name, load_average())
            share = OtherWork(allowed_cores())
            start, cpu = time.perf_counter(), time.process_time()
            outputs[name] = [hyp for src_ids in batches for hyp in translate(src_ids)]
            times[name].append((time.perf_counter() - start, time.process_time() - cpu))
            others[name].append(share.read())
    return {name: (_speed(times[name], outputs[name], loads[name], others[name]), outputs[name])
            for name in translates}  # fmt: skip


def _speed(
    times: list[tuple[float, float]],
    outputs: list[list[int]],
    load: float,
    others: list[float | None],
) -> dict:
    walls = [wall for wall, _ in times]
    best = min(walls)
    n_tokens = sum(len(hyp) for hyp in outputs)
    return {
        "sentences": len(outputs),
        "tgt_tokens": n_tokens,
        "sent_per_s": round(len(outputs) / best, 1),
        "tok_per_s": round(n_tokens / best, 1),
        "best_s": round(best, 3),
        "cpu_s": round(min(cpu for _, cpu in times), 3),
        "median_s": round(sorted(walls)[len(walls) // 2], 3),
        "repeats": len(times),
        "load_before": load,
        # the most of our cores' time other processes took in one of the rounds (`OtherWork`)
        "others": max((round(o, 2) for o in others if o is not None), default=None),
    }


def _agreement(ours: list[list[int]], theirs: list[list[int]]) -> float:
    return sum(a == b for a, b in zip(ours, theirs, strict=True)) / len(ours)


def print_table(results: list[dict], file=sys.stdout) -> None:
    header = f"{'system':<10}{'beam':>5}{'batch':>6}{'sent/s':>9}{'tok/s':>9}{'best s':>8}"
    header += f"{'cpu s':>8}{'load':>6}{'vs HF':>7}{'vs ours':>8}{'agree':>7}"
    print(header, file=file)
    speeds = {(r["system"], r["beam"], r["batch"]): r["tok_per_s"] for r in results}

    def ratio(r: dict, system: str) -> str:
        reference = speeds.get((system, r["beam"], r["batch"]))
        return f"{r['tok_per_s'] / reference:.2f}x" if reference else "-"

    for r in results:
        agree = f"{r['agreement']:.1%}" if "agreement" in r else "-"
        print(
            f"{r['system']:<10}{r['beam']:>5}{r['batch']:>6}{r['sent_per_s']:>9}"
            f"{r['tok_per_s']:>9}{r['best_s']:>8}{r.get('cpu_s', '-'):>8}{r['load_before']:>6}"
            f"{ratio(r, 'hf'):>7}{ratio(r, 'ours'):>8}{agree:>7}",
            file=file,
        )
    if results:
        r = results[0]
        length = f"fixed length {r['fixed_length']}" if r["fixed_length"] else "free length"
        print(
            f"{r['model']}, {length}, {r.get('device', 'cpu')}, {table_footer(r)}, "
            f"transformers {r.get('transformers', '-')}",
            file=file,
        )
    taken = max((r["others"] for r in results if r.get("others") is not None), default=0.0)
    if taken >= SHARED_FROM:
        print(
            f"other processes took up to {taken} of {usable_cores()} core(s)' time while a "
            "system was timed, so the wall times and their ratios vary; the cpu s column "
            "varies far less",
            file=file,
        )


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
