"""`tmt attention`: the attention maps of one sentence pair, drawn to a PNG."""

from __future__ import annotations

import argparse

from transformer_mt.cli.common import add_device_flag, add_language_flags, device_of, require_text


def add_attention(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("attention", help="draw attention heatmaps of one sentence pair to a PNG")
    p.add_argument("--checkpoint", required=True, help="e.g. runs/X/checkpoints/best.pt")
    p.add_argument("--src", required=True, help="source sentence")
    p.add_argument("--tgt", help="target sentence (default: the greedy translation)")
    p.add_argument("--out", "--output", required=True, help="PNG to write")
    p.add_argument("--layer", type=int, help="only this layer (default: all)")
    p.add_argument("--head", type=int, help="only this head (default: all)")
    add_device_flag(p)
    add_language_flags(p)
    p.set_defaults(handler=_run_attention)


def _run_attention(args: argparse.Namespace) -> int:
    from transformer_mt.files import check_output
    from transformer_mt.inference.attention_maps import draw_attention
    from transformer_mt.input_files import checkpoint_input_files

    require_text("--src", args.src)
    require_text("--tgt", args.tgt)
    check_output(args.out, checkpoint_input_files(args.checkpoint))
    out = draw_attention(
        args.checkpoint,
        args.src,
        args.out,
        tgt=args.tgt,
        layer=args.layer,
        head=args.head,
        device=device_of(args),
        languages=(args.src_lang, args.tgt_lang),
    )
    print(out)
    return 0
