"""`tmt average`, `tmt import`, `tmt export` and `tmt info`: checkpoints averaged, made from a
public model, written in another toolkit's format, and described."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys


def add_average(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("average", help="average the weights of the last N periodic checkpoints")
    p.add_argument("inputs", nargs="+", help="run directories, checkpoint directories or .pt files")
    p.add_argument("--last", type=int, help="average only the newest N (1 or more) checkpoints")
    p.add_argument("--out", "--output", required=True, help="the averaged checkpoint to write")
    p.set_defaults(handler=_run_average)


def _run_average(args: argparse.Namespace) -> int:
    from transformer_mt.artifacts import save_checkpoint
    from transformer_mt.checkpoint_average import average_checkpoints
    from transformer_mt.training.checkpoints import resolve_average_inputs

    paths = resolve_average_inputs(args.inputs, args.last, args.out)
    if args.last is not None and len(paths) < args.last:
        print(
            f"warning: averaging {len(paths)} checkpoints: only {len(paths)} of the {args.last} "
            "asked for exist",
            file=sys.stderr,
        )
    save_checkpoint(average_checkpoints(paths), args.out)
    print(f"averaged {len(paths)} checkpoints into {args.out}", file=sys.stderr)
    return 0


def add_import(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import", help="make a checkpoint of a public model (OPUS-MT, NLLB / M2M100)"
    )
    p.add_argument("source", help="a Hugging Face model directory, or a hub name when online")
    p.add_argument(
        "--out", "--output", required=True, help="checkpoint file to write, e.g. opus-de-en.pt"
    )
    p.set_defaults(handler=_run_import)


def _run_import(args: argparse.Namespace) -> int:
    from transformer_mt.checkpoint_info import describe
    from transformer_mt.interop.import_model import import_model

    imported = import_model(args.source, args.out)
    info = describe(args.out)  # as `tmt info` and `tmt translate` read it
    print(f"wrote {args.out}: translates {info.translates()}; {info.model}", file=sys.stderr)
    for note in imported.generation.notes:  # settings our search follows otherwise
        print(f"note: {note}", file=sys.stderr)
    for setting in imported.ignored:  # training-only settings: translation is the same
        print(f"note: left out {setting}", file=sys.stderr)
    return 0


def add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a Hugging Face (Marian, M2M100) or CTranslate2 model")
    p.add_argument("checkpoint", help="e.g. runs/X/checkpoints/best.pt")
    p.add_argument(
        "out_dir",
        help="directory to write (created; replaces an earlier export, never other files)",
    )
    p.add_argument(
        "--format",
        required=True,
        choices=["hf", "ctranslate2"],
        help="hf: a transformers Marian (or M2M100) model directory; ctranslate2: its model",
    )
    p.add_argument("--quantize", choices=["int8", "int8_float32", "int16"], help="ctranslate2 only")
    p.add_argument(
        "--shortlist",
        metavar="FILE",
        help="ctranslate2 only: include this vocabulary map (`tmt shortlist`) as vmap.txt, "
        "used by translate_batch(..., use_vmap=True)",
    )
    p.set_defaults(handler=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from transformer_mt.interop.export import export

    out, notes = export(
        args.checkpoint,
        args.out_dir,
        fmt=args.format,
        quantize=args.quantize,
        shortlist=args.shortlist,
    )
    print(f"wrote {args.format} model to {out}", file=sys.stderr)
    for note in notes:  # decode settings generate follows otherwise
        print(f"note: {note}", file=sys.stderr)
    return 0


def add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="what a checkpoint holds: how it was made, what it translates, its model, "
        "vocabulary, training and default search",
    )
    p.add_argument("checkpoint", help="e.g. runs/X/checkpoints/best.pt")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.set_defaults(handler=_run_info)


def _run_info(args: argparse.Namespace) -> int:
    from transformer_mt.checkpoint_info import describe
    from transformer_mt.cli.common import open_out

    info = describe(args.checkpoint)
    with contextlib.ExitStack() as stack:
        out = open_out("-", stack, flag=None)  # a closed or full stdout named, not silent
        out.write((json.dumps(info.to_dict()) if args.json else "\n".join(info.lines())) + "\n")
    return 0
