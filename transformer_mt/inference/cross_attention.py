"""Cross-attention of a teacher-forced pass over sentence pairs, and the word alignment read
from it: what `tmt translate --alignments`, documents' inline markup and the dropped-content
check (inference/dropped.py) look at.

Target token j is produced by decoder query j (input BOS + target[:j]); it aligns to the source
subword that query gives the largest weight in one decoder layer's cross-attention, averaged
over heads. The weights come from the plain-math attention path
(`Seq2SeqTransformer.attention_maps`); pairs go through it in length-sorted batches, each row
right-padded: padded source positions are masked out, padded target positions come after every
real query and are hidden from it by the causal mask, so a row's weights are those of the
pair alone (tested).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from transformer_mt.errors import SettingError, TmtError
from transformer_mt.model import Seq2SeqTransformer


def cross_attention(
    model: Seq2SeqTransformer,
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    layer: int,
    bos: int,
    max_tokens: int | None = None,
) -> list[Tensor]:
    """The cross-attention weights of decoder layer `layer` (negative: from the last),
    averaged over heads, for each (source, target) pair.

    Args:
        sources: per pair the source ids as the encoder reads them: language tags, the
            subwords, then EOS; no padding.
        targets: per pair the target ids, no BOS or EOS (forced language tags first); the
            queries are BOS + target[:-1], one per target token.
        bos: the model's start-of-target id.
        max_tokens: rows x the longest of their sources and targets, per forward pass (a
            pair longer than that goes alone); None: all pairs in one pass.

    Returns:
        per pair a (T, S) float32 tensor on the CPU, T = len(target), S = len(source); a
        pair with an empty target gets a (0, S) tensor.

    Raises:
        TmtError: `model` is an ensemble, which has no one cross-attention.
    """
    if not isinstance(model, Seq2SeqTransformer):
        raise TmtError(
            "an ensemble of checkpoints has no one cross-attention to align or check with; "
            "give one checkpoint"
        )
    device = next(model.parameters()).device
    found: list[Tensor | None] = [None] * len(sources)
    for rows in _batches(sources, targets, max_tokens):
        width = max(len(sources[i]) for i in rows)
        depth = max(1, max(len(targets[i]) for i in rows))
        src = torch.full((len(rows), width), model.pad_id, dtype=torch.long)  # (B, S)
        tgt_in = torch.full((len(rows), depth), model.pad_id, dtype=torch.long)  # (B, T)
        for row, i in enumerate(rows):
            src[row, : len(sources[i])] = torch.tensor(sources[i])
            queries = [bos, *targets[i][:-1]]
            tgt_in[row, : len(queries)] = torch.tensor(queries)
        lengths = torch.tensor([len(sources[i]) for i in rows])
        src_mask = torch.arange(width) < lengths[:, None]  # (B, S), True at real tokens
        with torch.no_grad():
            maps = model.attention_maps(
                src.to(device), tgt_in.to(device), src_mask[:, None, None, :].to(device)
            )
        weights = maps.cross[layer].mean(1).float().cpu()  # (B, T, S)
        for row, i in enumerate(rows):
            found[i] = weights[row, : len(targets[i]), : len(sources[i])]
    return found


def best_sources(
    weights: Tensor, source_tags: int = 0, target_tags: int = 0
) -> list[tuple[int, int]]:
    """(source index, target index) subword pairs from one pair's `weights` ((T, S), from
    `cross_attention`): each target token after the `target_tags` forced tags aligns to the
    source subword of largest weight, never to a language tag or the appended EOS (unless it
    is all there is); indices count from the first subword after the tags."""
    n_words = max(weights.size(1) - 1, source_tags + 1)  # up to the EOS
    best = weights[target_tags:, source_tags:n_words].argmax(-1)  # (T',)
    return [(int(s), t) for t, s in enumerate(best.tolist())]


def _batches(
    sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], max_tokens: int | None
) -> list[list[int]]:
    """Pair indices in batches of similar length, rows x longest row at most `max_tokens`."""
    cost = [max(len(s), len(t)) for s, t in zip(sources, targets, strict=True)]
    if max_tokens is None:
        return [list(range(len(cost)))] if cost else []
    batches: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(cost)), key=cost.__getitem__):
        if current and (len(current) + 1) * cost[i] > max_tokens:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def alignment_pairs(
    model: Seq2SeqTransformer,
    src_ids: Tensor,
    tgt_ids: list[int],
    layer: int,
    bos: int,
    source_tags: int = 0,
    target_tags: int = 0,
) -> list[tuple[int, int]]:
    """Subword alignment of one sentence pair from decoder layer `layer`'s cross-attention
    (`cross_attention.best_sources`): language tags are fed to the model but are not words of
    either side.

    Args:
        src_ids: (S,) `source_tags` language tags, the real source tokens, then EOS; no
            padding.
        tgt_ids: the translation's tokens, no BOS or EOS: `target_tags` forced tags first.

    Returns:
        (source index, target index) pairs, one per target token after the tags, indices
        counted from the first subword after the tags.
    """
    if len(tgt_ids) <= target_tags:
        return []
    (weights,) = cross_attention(model, [src_ids.tolist()], [tgt_ids], layer, bos)
    return best_sources(weights, source_tags, target_tags)


def check_alignment_layer(layer: int, n_layers: int) -> None:
    """Refuse a decoder layer the model lacks (negative counts from the last).

    Raises:
        SettingError: naming alignment_layer.
    """
    if not -n_layers <= layer < n_layers:
        raise SettingError(
            "alignment_layer",
            layer,
            f"the model has {n_layers} decoder layer(s) (0..{n_layers - 1}, or -1 for the last)",
        )
