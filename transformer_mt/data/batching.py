"""Token-budget batching: group pairs of similar length, pad them, build masks once per batch.

What the model sees, for a pair with source ids x (length m) and target ids y (length n):

    src_ids      x + [EOS]              m + 1 tokens (EOS gives even an empty line a real token)
    tgt_in_ids   [BOS] + y              n + 1 tokens (decoder input)
    tgt_out_ids  y + [EOS]              n + 1 tokens (what the loss predicts)

A model with language tags puts its direction's tags before x and y (`specials.Framing`).
A batch of B pairs costs B * max(S, T) tokens, S and T the padded source and target lengths,
tags included; `make_batches` keeps that at or below `max_tokens`, budgeting each pair by the
rows `collate` builds of it (`framed_lengths`).

Shapes (`pad_to_multiple` m > 1): each side is padded up to a multiple of m, though never past
the longest row of the corpus, and the budget counts those padded lengths, so the batch size
of a full batch follows from its lengths (max_tokens // max(S, T)). A GPU then meets a few
dozen batch shapes instead of a new one for almost every batch, and pays what a new shape
costs (kernel choice, allocator growth, CUDA graphs) a few dozen times per run. The padding
is masked like any other: the loss and the gradient do not change. m = 1 pads to the longest
row of the batch.

Order: the batches of an epoch are a pure function of (lengths, max_tokens, seed, epoch). Pairs
are shuffled, stably sorted by (source, target) length so that batch neighbours have almost the
same length (little padding), cut greedily at the token budget, and the batch order shuffled.
Re-running an epoch therefore gives the same batches, which is what exact resume from
(epoch, batch index) relies on; `cursor.BatchIterator` walks them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import torch

from transformer_mt.data.specials import OWN_FRAMING, OWN_SPECIALS, Framing, SpecialTokens
from transformer_mt.data.token_column import TokenColumn
from transformer_mt.errors import TmtError

if TYPE_CHECKING:  # annotations only: translating batches without `datasets` (encoding.py)
    from transformer_mt.data.encoding import EncodedCorpus

T = TypeVar("T")


class BatchingError(TmtError):
    """A single example cannot fit the token budget."""


def framed_lengths(
    corpus: EncodedCorpus, framing: Framing = OWN_FRAMING
) -> tuple[np.ndarray, np.ndarray]:
    """(N,) int64 lengths of each pair's source and target rows as `collate` builds them:
    its tokens, its direction's language tags, and the source's eos or the target's bos
    (decoder input) or eos (labels). What a pair costs the token budget, the one count that
    batching and the oversized-pair checks share."""
    directions = corpus.direction_of(np.arange(len(corpus)))
    src_tags = np.array([len(p) for p in framing.source_prefixes], np.int64)[directions]
    tgt_tags = np.array([len(p) for p in framing.target_prefixes], np.int64)[directions]
    return corpus.src.lengths + src_tags + 1, corpus.tgt.lengths + tgt_tags + 1


def oversized_pair(
    corpus: EncodedCorpus, framing: Framing, max_tokens: int
) -> tuple[int, int] | None:
    """(row, tokens) of the longest pair of `corpus`, when it alone is over `max_tokens` (its
    longer row as `framed_lengths` counts it); None when every pair fits a batch."""
    return _longest_over(np.maximum(*framed_lengths(corpus, framing)), max_tokens)


def _longest_over(cost: np.ndarray, max_tokens: int) -> tuple[int, int] | None:
    """(row, cost) of the largest of `cost`, when it is over `max_tokens`; else None."""
    if not len(cost) or cost.max() <= max_tokens:
        return None
    worst = int(cost.argmax())
    return worst, int(cost[worst])


def pair_too_long(where: str, number: int, source: str, tokens: int, max_tokens: int) -> str:
    """The refusal of training pair `number` (counted from 1 in its corpus, `where`) whose
    `tokens` are over `max_tokens`, quoting its `source`."""
    quoted = source if len(source) <= 40 else source[:40] + "..."
    return (
        f"{where}: training pair {number} ({quoted!r}) takes {tokens} tokens, more than "
        f"train.max_tokens={max_tokens}; raise train.max_tokens, or lower data.max_len to drop "
        "such pairs"
    )


@dataclass(frozen=True)
class Batch:
    """One training batch, padded with the pad id on the right.

    Shape (S, T: the longest row, or rounded up with `pad_to_multiple`):
        src_ids: (B, S) int64, each row x + EOS.
        src_mask: (B, 1, 1, S) bool, True at real source tokens (may be attended to).
        tgt_in_ids: (B, T) int64, BOS + y: the decoder input.
        tgt_out_ids: (B, T) int64, y + EOS: the labels; PAD where the loss must ignore.
        indices: (B,) int64, the pairs' positions in the corpus the batch came from.
        n_tgt_tokens: non-pad tokens in `tgt_out_ids` (the loss normaliser).
    """

    src_ids: torch.Tensor
    src_mask: torch.Tensor
    tgt_in_ids: torch.Tensor
    tgt_out_ids: torch.Tensor
    indices: torch.Tensor
    n_tgt_tokens: int

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The tensors the model reads, on `device`; `indices` stays on the CPU for bookkeeping.

        A non-blocking copy to a CUDA device goes through pinned memory: from pageable memory
        the driver may wait for the device before it copies, which would stall the host at
        every batch.
        """
        device = torch.device(device)

        def move(t: torch.Tensor) -> torch.Tensor:
            return (_staged(t, device) if non_blocking else t).to(device, non_blocking=non_blocking)

        src_ids, src_mask, tgt_in_ids, tgt_out_ids = map(move, self.model_inputs())
        return Batch(src_ids, src_mask, tgt_in_ids, tgt_out_ids, self.indices, self.n_tgt_tokens)

    def model_inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The tensors the model and the loss read: src_ids, src_mask, tgt_in_ids, tgt_out_ids."""
        return self.src_ids, self.src_mask, self.tgt_in_ids, self.tgt_out_ids

    def copy_into(self, buffers: Batch) -> None:
        """Write this batch's tensors into `buffers`, a batch of the same shapes (a CUDA
        graph's inputs), without waiting: through pinned memory, as `to` copies."""
        for buffer, values in zip(buffers.model_inputs(), self.model_inputs(), strict=True):
            buffer.copy_(_staged(values, buffer.device), non_blocking=True)


def _staged(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` ready for a copy to `device` that does not wait: in pinned memory when it goes from
    the CPU to a CUDA device (from pageable memory the driver may wait for the device)."""
    return t.pin_memory() if device.type == "cuda" and t.device.type == "cpu" else t


@dataclass(frozen=True)
class SourceBatch:
    """Source sentences to translate, sorted by length; `indices` restores input order.

    Shape:
        src_ids: (B, S) int64, each row x + eos, right-padded with the pad id.
        src_mask: (B, 1, 1, S) bool, True at real source tokens.
        indices: (B,) int64, each row's position in the input.
    """

    src_ids: torch.Tensor
    src_mask: torch.Tensor
    indices: torch.Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False) -> SourceBatch:
        return SourceBatch(
            self.src_ids.to(device, non_blocking=non_blocking),
            self.src_mask.to(device, non_blocking=non_blocking),
            self.indices,
        )


def make_batches(
    corpus: EncodedCorpus,
    max_tokens: int,
    seed: int,
    epoch: int,
    pad_to_multiple: int = 1,
    framing: Framing = OWN_FRAMING,
) -> list[np.ndarray]:
    """Split all pairs into length-grouped batches of at most `max_tokens`, in epoch order.

    Args:
        corpus: the pairs; only their lengths and directions are read.
        max_tokens: budget per batch, B * max(S, T) with S, T the rows `collate` builds with
            `framing` (`framed_lengths`: EOS / BOS and language tags) and the padding of
            `pad_to_multiple`.
        seed, epoch: the order is a pure function of these (and the lengths).
        pad_to_multiple: the lengths `collate` pads to (module docstring); pairs are sorted
            by their padded lengths, so that a batch rarely spans two of them.
        framing: what `collate` puts around each pair.

    Returns:
        A list of (B_i,) int64 index arrays; each pair appears in exactly one.

    Raises:
        BatchingError: a pair alone exceeds `max_tokens`.
    """
    src_cost, tgt_cost = framed_lengths(corpus, framing)
    found = _longest_over(np.maximum(src_cost, tgt_cost), max_tokens)
    if found is not None:
        raise BatchingError(
            f"a pair takes {found[1]} tokens (with its eos or bos and language tags), more than "
            f"max_tokens={max_tokens}; lower data.max_len or raise the token budget"
        )
    # Padded lengths stay within the longest pair, which fits the budget (checked above).
    src_cost = padded_lengths(src_cost, pad_to_multiple)
    tgt_cost = padded_lengths(tgt_cost, pad_to_multiple)
    cost = np.maximum(src_cost, tgt_cost)
    rng = np.random.default_rng([seed % 2**32, epoch])
    shuffled = rng.permutation(len(cost))
    # lexsort is stable and sorts by the last key first: source length, then target length;
    # the shuffle above decides the order among pairs of equal lengths.
    ordered = shuffled[np.lexsort((tgt_cost[shuffled], src_cost[shuffled]))]
    batches = _cut_at_budget(ordered, cost, max_tokens)
    return [batches[i] for i in rng.permutation(len(batches))]


def padded_lengths(lengths: np.ndarray, multiple: int) -> np.ndarray:
    """`lengths` rounded up to a multiple of `multiple`, capped at the longest of them (a
    padded row never needs a position the corpus' longest row does not)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return _rounded_up(lengths, multiple, lengths.max(initial=0))


def _rounded_up(lengths: np.ndarray | int, multiple: int, longest: int) -> np.ndarray | int:
    """`lengths` rounded up to a multiple of `multiple`, none above `longest`: the one rule
    by which `make_batches` budgets a pair and `collate` pads its batch."""
    if multiple == 1:
        return lengths
    return np.minimum(-(-lengths // multiple) * multiple, longest)


def _cut_at_budget(ordered: np.ndarray, cost: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Greedy cut of `ordered` into runs whose (size * longest) stays within the budget."""
    bounds = [0]
    longest = 0
    for position, index in enumerate(ordered.tolist()):
        longest_with = max(longest, int(cost[index]))
        if (position - bounds[-1] + 1) * longest_with > max_tokens:
            bounds.append(position)
            longest_with = int(cost[index])
        longest = longest_with
    bounds.append(len(ordered))
    return [ordered[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def shard_batches(batches: Sequence[T], rank: int, world_size: int) -> list[T]:
    """Rank `rank`'s share of an epoch: batches[rank::world_size], equal counts on every rank.

    The last len(batches) % world_size batches are left out of this epoch so that all ranks
    take the same number of steps (a rank with one batch fewer would hang the others in the
    gradient all-reduce). The batch order changes every epoch, so different batches are left out.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    usable = len(batches) - len(batches) % world_size
    return list(batches[rank:usable:world_size])


def collate(
    corpus: EncodedCorpus,
    indices: np.ndarray,
    framing: Framing = OWN_FRAMING,
    pad_to_multiple: int = 1,
) -> Batch:
    """Pad the pairs `indices` of `corpus` into a Batch (masks and shifted targets built here):
    each side framed by `framing` (the special ids, and the language tags of each pair's
    direction, around the tokens), and padded to a multiple of `pad_to_multiple` within the
    longest row of `corpus` (the lengths `make_batches` budgets with the same multiple)."""
    indices = np.asarray(indices, dtype=np.int64)
    specials = framing.specials
    pad, eos = specials.pad, (specials.eos,)
    directions = corpus.direction_of(indices)
    source_tags = np.asarray(framing.source_prefixes, dtype=np.int64)[directions]  # (B, P)
    tags = np.asarray(framing.target_prefixes, dtype=np.int64)[directions]  # (B, Q)
    starts = np.full((len(indices), 1), specials.bos, dtype=np.int64)
    multiple = pad_to_multiple
    src_ids = _pad_rows(corpus.src, indices, pad, source_tags, eos, multiple)
    tgt_in = np.concatenate([starts, tags], 1)
    tgt_in_ids = _pad_rows(corpus.tgt, indices, pad, tgt_in, (), multiple)
    tgt_out_ids = _pad_rows(corpus.tgt, indices, pad, tags, eos, multiple)
    src = torch.from_numpy(src_ids)
    return Batch(
        src_ids=src,
        src_mask=(src != pad)[:, None, None, :],  # (B, 1, 1, S)
        tgt_in_ids=torch.from_numpy(tgt_in_ids),
        tgt_out_ids=torch.from_numpy(tgt_out_ids),
        indices=torch.from_numpy(indices),
        n_tgt_tokens=int(corpus.tgt.lengths[indices].sum()) + tags.size + len(indices),
    )


def _pad_rows(
    column: TokenColumn,
    indices: np.ndarray,
    pad: int,
    prefix: np.ndarray,
    suffix: tuple[int, ...],
    multiple: int = 1,
) -> np.ndarray:
    """(B, L) int64 array of rows `indices`, each wrapped in its prefix (a row of the (B, P)
    `prefix`) and `suffix`, padded with `pad` to L, the longest such row rounded up to a
    multiple of `multiple` within the longest row of `column`."""
    rows = column.select(indices)
    lengths = rows.lengths
    start = prefix.shape[1]
    framed = start + len(suffix)
    width = int(lengths.max(initial=0)) + framed
    if multiple > 1:  # the cap reads the whole column's lengths: only when there is padding
        width = int(_rounded_up(width, multiple, int(column.lengths.max(initial=0)) + framed))
    out = np.full((len(indices), width), pad, dtype=np.int64)  # (B, L)
    row_of = np.repeat(np.arange(len(indices)), lengths)
    col_of = np.arange(len(rows.values)) - np.repeat(rows.offsets[:-1], lengths) + start
    out[row_of, col_of] = rows.values
    out[:, :start] = prefix
    every = np.arange(len(indices))
    for k, token in enumerate(suffix):
        out[every, lengths + start + k] = token
    return out


def make_source_batches(
    src: TokenColumn | Sequence[Sequence[int]],
    max_tokens: int,
    specials: SpecialTokens = OWN_SPECIALS,
) -> list[SourceBatch]:
    """Sort sources by length (longest first) and cut them into batches of <= `max_tokens`.

    Longest first makes an out-of-memory batch show up at once rather than at the end. A
    sentence longer than the budget gets a batch of its own rather than an error: at translation
    time every input must produce an output line.

    Args:
        src: token ids per sentence (no BOS/EOS).
        max_tokens: budget per batch, B * S with S counting the EOS.

    Returns:
        Batches whose `indices` put the outputs back in input order (see `restore_order`).
    """
    column = src if isinstance(src, TokenColumn) else TokenColumn.from_lists(src)
    cost = column.lengths + 1
    ordered = np.argsort(-cost, kind="stable")
    batches = []
    for indices in _cut_at_budget(ordered, cost, max_tokens):
        no_prefix = np.zeros((len(indices), 0), dtype=np.int64)
        rows = _pad_rows(column, indices, specials.pad, no_prefix, (specials.eos,))
        src_ids = torch.from_numpy(rows)
        src_mask = (src_ids != specials.pad)[:, None, None, :]
        batches.append(SourceBatch(src_ids, src_mask, torch.from_numpy(indices)))
    return batches


def restore_order(indices: Sequence[int], items: Sequence[T]) -> list[T]:
    """Put `items[j]`, produced for input `indices[j]`, back at position `indices[j]`."""
    out: list = [None] * len(indices)
    for index, item in zip(indices, items, strict=True):
        out[int(index)] = item
    return out
