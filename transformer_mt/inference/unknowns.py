"""Unknown pieces replaced by the source pieces they attend to (`DecodeConfig.replace_unk`).

A model writes the unknown piece (⁇) where its target vocabulary lacks what it would copy: a
name, a symbol, an emoji, a character its tokenizer never saw. Most of these come from the
source, so the source piece that the unknown one attends to most is put in its place (Luong
et al. 2015; OpenNMT's and fairseq's replace_unk, CTranslate2's replace_unknowns). A piece the
source vocabulary lacks as well is the characters it covers, so they come back as written.

The attention is one decoder layer's cross-attention averaged over heads, as `--alignments`
reads it (`cross_attention.best_sources`: never a language tag or the EOS), in one forced pass
over the hypotheses that hold an unknown piece, after the search: a translation without one
costs nothing more. CTranslate2 exports read the same average (`export_ct2`), so their
`replace_unknowns` copies the same pieces.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformer_mt.inference.cross_attention import best_sources, cross_attention
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
    """Per hypothesis, the source piece to write at each unknown piece it holds.

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
    targets = [list(hypotheses[k]) for k in holding]
    weights = cross_attention(model, [list(source)] * len(holding), targets, layer, bos)
    for k, tokens, pair_weights in zip(holding, targets, weights, strict=True):
        for s, t in best_sources(pair_weights, source_tags, target_tags):
            if tokens[target_tags + t] == unk:
                copied[k][t] = source_pieces[s]
    return copied
