"""`tmt attention`: heatmaps of a checkpoint's attention weights for one sentence pair.

One panel per (kind, layer, head), kinds in rows: encoder self-attention (source x source),
decoder self-attention (target input x target input) and cross-attention (target input x
source), with the subword pieces on the axes. The weights come from the plain-math attention
path (`Seq2SeqTransformer.attention_maps`). Without a target, the source is greedily
translated first. Every panel is CELL_INCHES square at DPI, so the PNG is
(columns * CELL_INCHES * DPI) x (rows * CELL_INCHES * DPI) pixels.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch
from torch import Tensor

from transformer_mt.config import GREEDY
from transformer_mt.errors import SettingError
from transformer_mt.figures import figure_format, pyplot
from transformer_mt.files import atomic_path, check_output
from transformer_mt.inference.languages import Pair
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.translator import Translator

log = logging.getLogger(__name__)

CELL_INCHES = 3.0
DPI = 100
# The most pieces an axis of a panel names: a 3-inch axis holds about this many labels in
# 6-point type, and drawing 600 labels on each axis of 36 panels took minutes. A longer axis
# names every k-th piece.
MAX_LABELS = 60


def draw_attention(
    checkpoint: str | Path,
    src: str,
    out: str | Path,
    *,
    tgt: str | None = None,
    layer: int | None = None,
    head: int | None = None,
    device: str = "cpu",
    languages: Pair = (None, None),
) -> Path:
    """Draw attention maps of `src` (and `tgt`, else its greedy translation) to the PNG `out`.

    The source goes through the `Translator` (truncated to the position table, language tag
    and EOS added); the decoder input, BOS and the target (after a forced language tag), is cut
    to the position table too; either cut is warned of.

    Args:
        layer, head: draw only this layer (of encoder and decoder) / head; None: all.
        languages: (src_lang, tgt_lang) of a model with language tags (see `LineSettings`).

    Raises:
        TmtError: an empty source or target, a layer or head the model does not have, `out` would
            destroy a file (`files.check_output`), a suffix of `out` no figure format has,
            or no matplotlib.
    """
    check_output(out, [(checkpoint, "checkpoint")])
    pyplot("tmt attention")  # before the model loads: without matplotlib, nothing to do
    chosen = figure_format(out)
    lines = LineSettings(src_lang=languages[0], tgt_lang=languages[1])
    translator = Translator.from_checkpoint(str(checkpoint), device=device, lines=lines, **GREEDY)
    model, cfg = translator.model, translator.model.cfg
    source = translator.encoding.source_ids(src)
    if not source:
        raise SettingError("src", None, "the source sentence is empty")
    if tgt is not None and not tgt.strip():
        raise SettingError(
            "tgt",
            None,
            "the target sentence is empty; leave it out to draw the model's own translation",
        )
    if translator.encoding.truncated_lines:
        _warn_cut("source", cfg.max_positions)
    if tgt is None:
        ((batch, found),) = translator.search_batches([source])
        tgt_ids = found[0].best.tokens
    else:
        batch = next(translator.batches([source]))
        tgt_ids = translator.encoding.prefix_ids(tgt)  # cut to the positions
        if len(translator.tgt_tokenizer.encode(tgt)) > len(tgt_ids) - len(translator.target_prefix):
            _warn_cut("target", cfg.max_positions)
    src_ids = batch.src_ids[0].tolist()  # the source subwords and EOS
    tgt_in = [translator.specials.bos, *tgt_ids][: cfg.max_positions]  # the last predicts EOS
    with torch.no_grad():
        maps = model.attention_maps(batch.src_ids, torch.tensor([tgt_in], device=device))
    src_pieces = [translator.src_tokenizer.id_to_piece(i) for i in src_ids]
    tgt_pieces = [translator.tgt_tokenizer.id_to_piece(i) for i in tgt_in]
    panels = [
        ("encoder self", _pick(maps.encoder, layer, "encoder"), src_pieces, src_pieces),
        ("decoder self", _pick(maps.decoder, layer, "decoder"), tgt_pieces, tgt_pieces),
        ("cross", _pick(maps.cross, layer, "decoder"), tgt_pieces, src_pieces),
    ]
    heads = list(range(cfg.n_heads)) if head is None else [head]
    if head is not None and not 0 <= head < cfg.n_heads:
        raise SettingError(
            "head", head, f"the model has {cfg.n_heads} heads (0..{cfg.n_heads - 1})"
        )
    return _plot(panels, heads, Path(out), chosen)


def _warn_cut(side: str, positions: int) -> None:
    log.warning(
        "the %s is longer than the model's %d positions: only its first pieces are drawn",
        side,
        positions,
    )


def _pick(weights: list[Tensor], layer: int | None, side: str) -> list[tuple[int, Tensor]]:
    """(layer index, (H, Tq, Tk) weights) of every layer, or of `layer` alone."""
    if layer is None:
        return [(i, w[0]) for i, w in enumerate(weights)]
    if not 0 <= layer < len(weights):
        raise SettingError("layer", layer, f"the {side} has {len(weights)} layer(s)")
    return [(layer, weights[layer][0])]


def _plot(
    panels: list[tuple[str, list[tuple[int, Tensor]], list[str], list[str]]],
    heads: list[int],
    out: Path,
    chosen: str,
) -> Path:
    plt = pyplot("tmt attention")
    rows = [(kind, i, w, ys, xs) for kind, layers, ys, xs in panels for i, w in layers]
    longest = max(len(labels) for _, _, ys, xs in panels for labels in (ys, xs))
    if longest > MAX_LABELS:
        log.warning(
            "%d panels with up to %d pieces an axis: one piece in %d is named",
            len(rows) * len(heads),
            longest,
            math.ceil(longest / MAX_LABELS),
        )
    fig, axes = plt.subplots(
        len(rows),
        len(heads),
        figsize=(CELL_INCHES * len(heads), CELL_INCHES * len(rows)),
        dpi=DPI,
        squeeze=False,
    )
    for r, (kind, layer, weights, y_labels, x_labels) in enumerate(rows):
        for c, h in enumerate(heads):
            ax = axes[r][c]
            ax.imshow(weights[h].float().cpu().numpy(), vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_title(f"{kind} L{layer} H{h}", fontsize=8)
            ax.set_xticks(*_every_kth(x_labels), rotation=90, fontsize=6)
            ax.set_yticks(*_every_kth(y_labels), fontsize=6)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=DPI, format=chosen)  # the temporary name has no suffix
    plt.close(fig)
    return out


def _every_kth(labels: list[str]) -> tuple[range, list[str]]:
    """Tick positions and labels of an axis of `labels`: all of them, or every k-th where
    there are more than MAX_LABELS."""
    k = math.ceil(len(labels) / MAX_LABELS)
    return range(0, len(labels), k), labels[::k]
