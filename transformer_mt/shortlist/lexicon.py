"""Lexical translation probabilities p(target id | source id) from a parallel corpus (IBM
Model 1, Brown et al. 1993), and the shortlist they give: the likeliest target ids of each
source id.

Model 1 rather than raw co-occurrence counts: frequent target tokens ("a", "the", ".")
co-occur with every source token, and counts alone would put them at the top of every list;
Model 1's expectation-maximisation lets each target token be explained by the source token
that explains it best, so a list keeps the translations of its source token. Its EM runs here
on numpy arrays: one probability per distinct co-occurring (source, target), and the corpus's
co-occurrences (a few million for Multi30k's 29,000 pairs) a block at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from transformer_mt.errors import SettingError
from transformer_mt.shortlist.corpus import Chunk

ITERATIONS = 5  # EM iterations; the lists change little after the first few


@dataclass(frozen=True)
class Lexicon:
    """Sparse p(target | source): entry i is p(`targets[i]` | `sources[i]`) = `probs[i]`."""

    sources: np.ndarray  # (E,) int64
    targets: np.ndarray  # (E,) int64
    probs: np.ndarray  # (E,) float64

    def best(self, k: int, min_prob: float = 0.0) -> dict[int, list[int]]:
        """The `k` likeliest target ids of each source id with p >= `min_prob`, likeliest
        first (ties: the lower id first)."""
        order = np.lexsort((self.targets, -self.probs, self.sources))
        sources, targets, probs = self.sources[order], self.targets[order], self.probs[order]
        starts = np.flatnonzero(np.r_[True, sources[1:] != sources[:-1]])
        rank = np.arange(len(sources)) - np.repeat(starts, np.diff(np.r_[starts, len(sources)]))
        keep = (rank < k) & (probs >= min_prob)
        lists: dict[int, list[int]] = {}
        for source, target in zip(sources[keep].tolist(), targets[keep].tolist(), strict=True):
            lists.setdefault(source, []).append(target)
        return lists


def model1(read: Callable[[], Iterable[Chunk]], iterations: int = ITERATIONS) -> Lexicon:
    """IBM Model 1 on (source ids, target ids) pairs, with a NULL source in every sentence for
    target tokens no source token explains; uniform start.

    Each iteration: every target token's expected alignment over its sentence's source tokens
    (their p(t | s), normalised), summed per (s, t) and normalised per s.

    Args:
        read: the corpus from its start, a chunk of pairs at a time; called once to find the
            co-occurring (s, t), then once per iteration. Memory holds one probability per
            distinct (s, t), one block of about `BLOCK_ENTRIES` co-occurrences, and the
            co-occurrences' indices of the first chunks, up to `CACHED_BYTES`, so that
            iterations on a corpus that fits that budget do not find them again.
    """
    keys = _distinct(read)
    if not len(keys):
        return Lexicon(*(np.zeros(0, dtype=dtype) for dtype in (np.int64, np.int64, float)))
    sources, targets = (keys >> _TARGET_BITS) - 1, keys & _TARGET_MASK
    source_index = np.unique(sources, return_inverse=True)[1]
    probs = np.full(len(keys), 1.0)
    cached: list[list[_Indexed]] = []  # per chunk, from the first
    for _ in range(iterations):
        counts = np.zeros(len(keys))
        for entry, group in _indexed(read, keys, cached):
            p = probs[entry]
            posterior = p / np.bincount(group, weights=p)[group]
            np.add.at(counts, entry, posterior)  # in the block's order, as a bincount sums
        probs = counts / np.bincount(source_index, weights=counts)[source_index]
    real = sources >= 0  # the NULL source explains, but lists no translations
    return Lexicon(sources[real], targets[real], probs[real])


# A (source, target) co-occurrence as one int64: source + 1 (the NULL source is 0) above the
# target id, which is under 2**31 (SentencePiece's vocabulary sizes are int32).
_TARGET_BITS = 32
_TARGET_MASK = (1 << _TARGET_BITS) - 1
BLOCK_ENTRIES = 4_000_000  # co-occurrences a block: about 100 MB of arrays
CACHED_BYTES = 1 << 30  # co-occurrence indices kept between iterations: 8 bytes each
_Indexed = tuple[np.ndarray, np.ndarray]  # (entry, group) of each co-occurrence of a block


@dataclass(frozen=True)
class _Block:
    """The co-occurrences of consecutive pairs, one per (target token, source token or NULL)
    of each pair, a target token's sources in order; `group` numbers the target tokens (their
    alignments normalise together)."""

    keys: np.ndarray
    group: np.ndarray


def _indexed(
    read: Callable[[], Iterable[Chunk]], keys: np.ndarray, cached: list[list[_Indexed]]
) -> Iterator[_Indexed]:
    """Each block's co-occurrences as indices into `keys`, with their groups: from `cached`
    for the chunks it holds, else found and added to it while it is under `CACHED_BYTES`.

    Finding them is a lookup in the sorted `keys`: each distinct key of the block once (sorted,
    so that the binary searches walk `keys` in order), then spread to its co-occurrences.
    """
    held = sum(entry.nbytes + group.nbytes for blocks in cached for entry, group in blocks)
    for c, chunk in enumerate(read()):
        if c < len(cached):
            yield from cached[c]
            continue
        found = []
        for block in _blocks([chunk]):
            distinct, inverse = _unique(block.keys)
            entry = np.searchsorted(keys, distinct).astype(_index_type(len(keys)))[inverse]
            found.append((entry, block.group.astype(_index_type(len(block.group)))))
            yield found[-1]
        held += sum(entry.nbytes + group.nbytes for entry, group in found)
        if c == len(cached) and held <= CACHED_BYTES:
            cached.append(found)


def _index_type(size: int) -> type:
    return np.int32 if size < 2**31 else np.int64


def _unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct `values`, and the index of each value among them.

    Written for speed: numpy 2.4's `np.unique` took 2.4 s for 4 million int64 keys where a sort
    took 0.1 s (Intel Xeon with AMX)."""
    order = np.argsort(values)
    ordered = values[order]
    first = _firsts(ordered)
    inverse = np.empty(len(values), dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def _blocks(chunks: Iterable[Chunk]) -> Iterator[_Block]:
    """The co-occurrences of `chunks`, about `BLOCK_ENTRIES` a block (a longer pair alone)."""
    for chunk in chunks:
        src_len, tgt_len = chunk.lengths()
        ends = np.cumsum((src_len + 1) * tgt_len)
        start = 0
        while start < len(chunk):
            done = ends[start - 1] if start else 0
            stop = max(int(np.searchsorted(ends, done + BLOCK_ENTRIES, side="right")), start + 1)
            yield _co_occurrences(chunk.pairs(start, stop))
            start = stop


def _co_occurrences(chunk: Chunk) -> _Block:
    """`_Block` of one chunk, built without a loop over its pairs."""
    src_len, tgt_len = chunk.lengths()
    width = src_len + 1  # the sources and NULL
    # Each pair's sources + 1, after a 0 for NULL.
    with_null = np.insert(chunk.src.astype(np.int64) + 1, chunk.src_ends - src_len, 0)
    first = np.cumsum(width) - width  # where each pair starts in with_null
    pair = np.repeat(np.arange(len(chunk)), tgt_len)  # the pair of each target token
    reps = width[pair]
    starts = np.cumsum(reps) - reps
    group = np.repeat(np.arange(len(pair)), reps)
    within = np.arange(int(reps.sum())) - starts[group]
    source = with_null[first[pair][group] + within]
    target = chunk.tgt.astype(np.int64)[group]
    return _Block((source << _TARGET_BITS) | target, group)


def _distinct(read: Callable[[], Iterable[Chunk]]) -> np.ndarray:
    """The distinct co-occurrence keys of the corpus, sorted. Each block's are merged into the
    whole once they number as many as it holds, so that merging costs a few passes over the
    result rather than one per block."""
    found = np.zeros(0, dtype=np.int64)
    pending: list[np.ndarray] = []
    held = 0
    for block in _blocks(read()):
        pending.append(_sorted_distinct(block.keys))
        held += len(pending[-1])
        if held > len(found):
            found, pending, held = _sorted_distinct(np.concatenate([found, *pending])), [], 0
    return _sorted_distinct(np.concatenate([found, *pending]))


def _sorted_distinct(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)`, through a sort (see `_unique`)."""
    ordered = np.sort(values)
    return ordered[_firsts(ordered)]


def _firsts(ordered: np.ndarray) -> np.ndarray:
    """Whether each of the sorted `ordered` is the first of its value."""
    first = np.ones(len(ordered), dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first


def frequent(counts: np.ndarray, n: int) -> list[int]:
    """The `n` most frequent ids by `counts` (one count per id; ties: the lower id first), of
    those that occur."""
    order = np.lexsort((np.arange(len(counts)), -counts))
    return [int(i) for i in order[:n] if counts[i] > 0]


@dataclass(frozen=True)
class ShortlistSettings:
    """How long the lists are: the defaults kept the small student's BLEU on Multi30k valid
    (42.77 -> 42.74 at beam 2) with ~1,000 of 8,000 ids a batch (docs/distillation.md)."""

    per_source: int = 10  # target pieces listed per source piece
    frequent: int = 100  # the most frequent target pieces, allowed in every batch
    min_prob: float = 0.01  # a listed piece has p(target | source) at least this
    iterations: int = ITERATIONS

    def validate(self) -> None:
        for name in ("per_source", "frequent", "iterations"):
            if getattr(self, name) < 0:
                raise SettingError(name, getattr(self, name), "must be 0 or more")
        if not 0.0 <= self.min_prob <= 1.0:
            raise SettingError("min_prob", self.min_prob, "must be within [0, 1]")


DEFAULT_SETTINGS = ShortlistSettings()
