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

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np

if TYPE_CHECKING:
    from transformer_mt.config import TrainSource

T = TypeVar("T")

MIX_SEED = 0x5EED  # the draws of every mix; a constant, see the module docstring
DRAW_BLOCK = 4096  # source choices drawn at once; the draws do not depend on it


def mixing_weights(
    sources: Sequence[TrainSource], sizes: Sequence[int] | None, temperature: float | None
) -> list[float]:
    """The proportions `interleave` draws the sources by: their weights (temperature None), or
    (weight_k * n_k) ** (1 / T) for sources of `sizes` n_k pairs (`data.temperature`).

    Normalised before the power, so that large corpora do not overflow it.
    """
    weights = [source.weight for source in sources]
    if temperature is None:
        return weights
    assert sizes is not None, "temperature sampling needs the sources' sizes"
    scaled = np.asarray(weights, np.float64) * np.asarray(sizes, np.float64)
    return ((scaled / scaled.sum()) ** (1.0 / temperature)).tolist()


def interleave(
    sources: Sequence[Callable[[], Iterable[T]]], weights: Sequence[float], seed: int = MIX_SEED
) -> Iterator[T]:
    """The items of `sources` mixed by `weights`, until each has been read to its end once.

    Args:
        sources: one function per source that opens it from its first item; called again
            when the source runs out before the others. Each source must yield an item (an
            empty one raises RuntimeError when first drawn).
        weights: (K,) positive mixing proportions, one per source.
        seed: of the generator that chooses the source of each item.

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
    while True:
        # Uniform doubles against the cumulative weights: the stream of `random` is stable
        # across NumPy versions, which `Generator.choice` does not promise.
        draws = rng.random(DRAW_BLOCK) * cumulative[-1]
        chosen = np.searchsorted(cumulative, draws, side="right")
        for k in np.minimum(chosen, len(sources) - 1).tolist():  # a product rounded up to the sum
            if ahead[k] is end:  # read to its end before: start it again
                readers[k] = iter(sources[k]())
                ahead[k] = next(readers[k])
            item, ahead[k] = ahead[k], next(readers[k], end)
            yield item
            if ahead[k] is end:
                unfinished.discard(k)
                if not unfinished:
                    return
