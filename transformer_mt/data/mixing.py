"""Several training corpora as one stream, mixed by weight (`data.train` as a list of sources).

    each next item comes from source k with probability w_k / sum(w)
    a source that runs out starts again from its first item (oversampling)
    the stream ends when every source has been read to its end at least once: with the last
        item of the last source to get there

This is `datasets.interleave_datasets(..., probabilities=..., stopping_strategy=
"all_exhausted")` (which ends at the next draw of that source instead), written out over plain
iterators so that the lazy line readers of `dataset.stream_pairs` and the row ranges of
`dataset.load_split` go through the same draws: the streamed and in-memory training sets hold
the same pairs in the same order, and every reader keeps its own line-numbered errors. An
epoch holds about max_k(n_k * sum(w) / w_k) items for sources of n_k items: the source that
takes longest to finish at its rate sets it.

Sources are interleaved rather than concatenated because the streaming reader shuffles only
within chunks of `data.shuffle_buffer` consecutive pairs: a concatenation would give batches
from one corpus at a time.

The draws are a pure function of the weights and `MIX_SEED`, not of `train.seed`: the mix is
part of the corpus, so runs with other seeds share its encoded cache and tokenizer, and exact
resume, which reads the stream again and skips pairs by their number, finds the same pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from transformer_mt.errors import TmtError

if TYPE_CHECKING:
    from transformer_mt.config import TrainSource

T = TypeVar("T")

MIX_SEED = 0x5EED  # the draws of every mix; a constant, see the module docstring
DRAW_BLOCK = 4096  # source choices drawn at once; the draws do not depend on it
MIN_SHARE = 1e-6  # the least share of the pairs a source may be drawn for
IN_MEMORY_REPEATS = 100  # an epoch held in memory: at most this many times the pairs read


class MixError(TmtError):
    """Proportions under which an epoch of the mix would in practice never end."""


def mixing_weights(
    sources: Sequence[TrainSource], sizes: Sequence[int] | None, temperature: float | None
) -> list[float]:
    """The proportions `interleave` draws the sources by: their weights (temperature None), or
    (weight_k * n_k) ** (1 / T) for sources of `sizes` n_k pairs (`data.temperature`).

    Taken in logarithms relative to the largest, so that neither large corpora nor a
    temperature near 0 overflow it (the largest source keeps a share of 1 before the sum).
    """
    weights = [source.weight for source in sources]
    if temperature is None:
        if math.isfinite(sum(weights)):
            return weights
        top = max(weights)  # 1e308 twice: the sum overflows and every share read as 0
        return [weight / top for weight in weights]
    assert sizes is not None, "temperature sampling needs the sources' sizes"
    # Each logarithm taken alone: the product of a weight of 1e308 and a size overflows.
    scaled = np.log(np.asarray(weights, np.float64)) + np.log(np.asarray(sizes, np.float64))
    tempered = np.exp((scaled - scaled.max()) / temperature)  # the largest is 1: none overflow
    return (tempered / tempered.sum()).tolist()


def checked_proportions(
    keys: Sequence[str],
    sources: Sequence[TrainSource],
    sizes: Sequence[int] | None,
    temperature: float | None,
    *,
    in_memory: bool,
) -> list[float]:
    """`mixing_weights`, refused when a source is drawn for less than `MIN_SHARE` of the pairs,
    or (`in_memory`, the training set held whole) when an epoch would hold more than
    `IN_MEMORY_REPEATS` times the pairs read.

    An epoch ends when every source has been read to its end, so the rarest source sets its
    length: about n_k / p_k pairs. A weight of 1e-30 beside 1, or a temperature near 0 that
    sends p_k to 0, makes an epoch that never ends, or a training set beyond any memory; and
    a source drawn that rarely is not trained on anyway.

    Args:
        keys: each source's config key (`data.train[k]`), for the messages.

    Raises:
        MixError: naming the source, its weight and share.
    """
    proportions = mixing_weights(sources, sizes, temperature)
    with np.errstate(invalid="ignore", divide="ignore"):  # all zero: NaN shares, refused
        shares = np.asarray(proportions, np.float64) / sum(proportions)
        epochs = np.asarray(sizes or (), np.float64) / shares if in_memory else None
    tempered = "" if temperature is None else f" at data.temperature={temperature:g}"
    for key, source, share in zip(keys, sources, shares.tolist(), strict=True):
        if not share >= MIN_SHARE:
            raise MixError(
                f"{key}.weight={source.weight:g}{tempered}: the source is drawn for {share:.3g}"
                f" of the pairs, under {MIN_SHARE:g}; raise its weight or leave it out"
            )
    if epochs is not None and epochs.max() > IN_MEMORY_REPEATS * sum(sizes or ()):
        k = int(epochs.argmax())
        raise MixError(
            f"{keys[k]}.weight={sources[k].weight:g}{tempered}: an epoch ends when this source"
            f" of {sizes[k]} pairs, drawn for {shares[k]:.3g} of the pairs, has been read to"
            f" its end: about {epochs[k]:.3g} pairs, over {IN_MEMORY_REPEATS} times the"
            f" {sum(sizes)} read, to hold in memory; raise its weight, or stream the"
            " training set (data.streaming: true)"
        )
    return proportions


def interleave(
    sources: Sequence[Callable[[], Iterable[T]]],
    weights: Sequence[float],
    seed: int = MIX_SEED,
    keys: Sequence[str] | None = None,
) -> Iterator[T]:
    """The items of `sources` mixed by `weights`, until each has been read to its end once.

    Args:
        sources: one function per source that opens it from its first item; called again
            when the source runs out before the others. Each source must yield an item (an
            empty one raises RuntimeError when first drawn).
        weights: (K,) positive mixing proportions, one per source.
        seed: of the generator that chooses the source of each item.
        keys: each source's config key, for a stream whose sizes are not known before: the
            mix is refused (MixError, naming the rarest unfinished source) once it has drawn
            over `IN_MEMORY_REPEATS` times the distinct items read, as `checked_proportions`
            refuses such an epoch up front where the sizes are known. Everything that reads
            an epoch of the stream (a tokenizer's sample, a shortlist) would read it all.

    Returns:
        The mixed items, lazily: a source is read one item beyond what has been drawn from it
        (to know that it has ended when its last item is drawn).
    """
    cumulative = np.cumsum(np.asarray(weights, dtype=np.float64))
    rng = np.random.default_rng(seed)
    end = object()
    readers = [iter(open_source()) for open_source in sources]
    ahead = [next(reader, end) for reader in readers]  # each source's next item
    unfinished = set(range(len(sources)))
    drawn, distinct = 0, [0] * len(sources)  # items drawn; each source's on its first pass
    while True:
        if keys is not None and drawn > IN_MEMORY_REPEATS * sum(distinct):
            _refuse_repeats(keys, weights, unfinished, drawn, sum(distinct))
        drawn += DRAW_BLOCK
        # Uniform doubles against the cumulative weights: the stream of `random` is stable
        # across NumPy versions, which `Generator.choice` does not promise.
        draws = rng.random(DRAW_BLOCK) * cumulative[-1]
        chosen = np.searchsorted(cumulative, draws, side="right")
        for k in np.minimum(chosen, len(sources) - 1).tolist():  # a product rounded up to the sum
            if ahead[k] is end:  # read to its end before: start it again
                readers[k] = iter(sources[k]())
                ahead[k] = next(readers[k])
            item, ahead[k] = ahead[k], next(readers[k], end)
            distinct[k] += k in unfinished
            yield item
            if ahead[k] is end:
                unfinished.discard(k)
                if not unfinished:
                    return


def _refuse_repeats(
    keys: Sequence[str],
    weights: Sequence[float],
    unfinished: set[int],
    drawn: int,
    distinct: int,
) -> None:
    """Raise the MixError of `interleave`, naming its rarest unfinished source."""
    k = min(unfinished, key=lambda i: weights[i])
    share = weights[k] / sum(weights)
    raise MixError(
        f"{keys[k]}: an epoch ends when this source, drawn for {share:.3g} of the pairs, has "
        f"been read to its end, and after {drawn} pairs it has not: over {IN_MEMORY_REPEATS} "
        f"times the {distinct} distinct pairs read; raise its weight"
    )
