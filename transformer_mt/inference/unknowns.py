"""Unknown pieces replaced by the source pieces they attend to (`DecodeConfig.replace_unk`).

A model writes the unknown piece (⁇) where its target vocabulary lacks what it would copy: a
number, a name, a symbol, a character its tokenizer never saw. These nearly always come from
the source, where they are unknown pieces too (a joint vocabulary lacks a character on both
sides), so each unknown piece of a translation is written as the source's unknown piece it
attends to most; a source without one gives the source piece it attends to most (Luong et al.
2015; OpenNMT's and fairseq's replace_unk, CTranslate2's replace_unknowns, which choose among
all source pieces). A piece the source vocabulary lacks is the characters it covers, so they
come back as written.

Why prefer the source's unknown pieces: a Transformer's cross-attention is a rough alignment,
and its largest weight often falls on a neighbouring word or the final full stop. On Multi30k
de-en with a vocabulary lacking digits, choosing among all source pieces put the right number
in 2 of 16 translations, among the unknown ones in 8 (docs/results.md, 2026-12-06).

The attention is one decoder layer's cross-attention averaged over heads, as `--alignments`
reads it (by default the last layer), in one forced pass over the hypotheses that hold an
unknown piece, after the search: a translation without one costs nothing more. CTranslate2
exports read the same average (`export_ct2`), so where the source holds no unknown piece their
`replace_unknowns` copies the same pieces.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from transformer_mt.inference.cross_attention import cross_attention
from transformer_mt.model import Seq2SeqTransformer


def copied_pieces(
    model: Seq2SeqTransformer,
    source: Sequence[int],
    source_pieces: Sequence[str],
    hypotheses: Sequence[Sequence[int]],
    unk: int,
    bos: int,
    layer: int = -1,
    tags: tuple[int, int] = (0, 0),
) -> list[dict[int, str]]:
    """Per hypothesis, the source piece to write at each unknown piece it holds: of the
    source's unknown pieces (all its pieces when it has none), the one it attends to most.

    Args:
        source: the ids the encoder read: language tags, the subwords, then EOS.
        source_pieces: the piece of each subword of `source` after its tags
            (`Tokenizer.encode_pieces`).
        hypotheses: each hypothesis' tokens, forced target tags first, no BOS or EOS.
        layer: the decoder layer whose cross-attention points to the source.
        tags: how many language tags start the source and each hypothesis.

    Returns:
        per hypothesis {position counted after its tags: source piece}; empty without an
        unknown piece.
    """
    source_tags, target_tags = tags
    holding = [k for k, tokens in enumerate(hypotheses) if unk in tokens[target_tags:]]
    copied: list[dict[int, str]] = [{} for _ in hypotheses]
    if not holding:
        return copied
    words = torch.tensor(source[source_tags : source_tags + len(source_pieces)])
    candidates = words == unk
    if not candidates.any():
        candidates = torch.ones_like(candidates)
    targets = [list(hypotheses[k]) for k in holding]
    weights = cross_attention(model, [list(source)] * len(holding), targets, layer, bos)
    for k, tokens, pair_weights in zip(holding, targets, weights, strict=True):
        attended = pair_weights[target_tags:, source_tags : source_tags + len(words)]
        best = attended.masked_fill(~candidates, -1.0).argmax(-1).tolist()
        for t, token in enumerate(tokens[target_tags:]):
            if token == unk:
                copied[k][t] = source_pieces[best[t]]
    return copied
