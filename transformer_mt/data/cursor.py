"""The training data cursor: one rank's batches, epoch after epoch, and where to resume.

`batching` decides what an epoch's batches are (a pure function of lengths, budget, seed and
epoch); this module walks them. Its position, (epoch, batch index) with the rank count and the
corpus key, is what a checkpoint stores, so a resumed run reads on exactly as an uninterrupted
one, also under another rank count.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from transformer_mt.data.batching import (
    Batch,
    BatchingError,
    collate,
    make_batches,
    shard_batches,
)
from transformer_mt.data.encoding import EncodedCorpus
from transformer_mt.data.specials import OWN_FRAMING, Framing
from transformer_mt.errors import TmtError

log = logging.getLogger(__name__)


class CorpusChanged(TmtError):
    """A saved position of another corpus than the cursor's (replaced under the same name)."""


@dataclass
class DataPosition:
    """The next batch to read: batch `batch_index` of epoch `epoch` (of one rank's share)."""

    epoch: int = 0
    batch_index: int = 0


class BatchIterator:
    """One rank's batches, epoch after epoch: the cursor the training loop reads.

    `next(batches)` collates the batch at `position` and moves on, to batch 0 of the next epoch
    after an epoch's last. An epoch's batches are a pure function of (seed, epoch), so an
    iterator given a saved position with `restore(state())` reads on exactly as an
    uninterrupted one. `pad_to_multiple` pads the lengths to a few shapes (module docstring).
    With `resample` (e.g. a `DropoutCorpus`) every epoch reads the corpus
    `resample(epoch)`, a new segmentation of the same pairs, instead of `corpus`; it is made
    once per epoch.

    Example:
        batches = BatchIterator(train, max_tokens=4096, seed=1)
        batches.restore(saved_position)  # {"epoch": 3, "batch_index": 120}
        batch = next(batches)
    """

    def __init__(
        self,
        corpus: EncodedCorpus,
        max_tokens: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        resample: Callable[[int], EncodedCorpus] | None = None,
        framing: Framing = OWN_FRAMING,
        pad_to_multiple: int = 1,
    ) -> None:
        self.corpus = corpus
        self.framing = framing
        self.max_tokens = max_tokens
        self.pad_to_multiple = pad_to_multiple
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.resample = resample
        self.position = DataPosition()
        self._resampled: tuple[int, EncodedCorpus] | None = None
        self._indices: tuple[int, list[np.ndarray]] | None = None

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        """The batch at `position`; the position moves to the one after it.

        Raises:
            BatchingError: this rank's share of the epoch is empty.
        """
        epoch = self.position.epoch
        indices = self.batch_indices(epoch)
        if not indices:
            raise BatchingError(
                f"epoch {epoch} has no batches for rank {self.rank} of {self.world_size}: the "
                "training set is too small for this many ranks"
            )
        rows = indices[self.position.batch_index]
        batch = collate(self.corpus_for(epoch), rows, self.framing, self.pad_to_multiple)
        self.position.batch_index += 1
        if self.position.batch_index >= len(indices):
            self.position = DataPosition(epoch + 1, 0)
        return batch

    def state(self) -> dict[str, int | str]:
        """The position as plain data (a checkpoint's), with the rank count it belongs to and
        the key of the corpus it counts in (`EncodedCorpus.key`, where known)."""
        state: dict[str, int | str] = {
            **dataclasses.asdict(self.position),
            "world_size": self.world_size,
        }
        if self.corpus.key is not None:
            state["corpus"] = self.corpus.key
        return state

    def restore(self, state: dict[str, int | str]) -> None:
        """Continue from a position returned by `state`, of this or another rank count.

        Every rank of a run stands at the same `batch_index` of its share, batches[rank::w],
        so w ranks at index i have read the epoch's first i * w batches between them. Another
        rank count w' resumes at index ceil(i * w / w'): exactly the unread batches when w'
        divides i * w, else after skipping fewer than w' of them. (An epoch's last
        len % w batches, which no rank of w reads, are read by w' ranks when they fit.)

        A position past the end of its epoch (a run resumed with a larger train.max_tokens
        or a stricter length filter cuts fewer batches) starts the next epoch.

        Raises:
            CorpusChanged: the position counts in a corpus of another text (its key differs).
        """
        stored, key = state.get("corpus"), self.corpus.key
        if stored is not None and key is not None and stored != key:
            raise CorpusChanged(
                f"its text is not the text the saved position counts in (corpus key {stored} "
                f"then, {key} now): resuming would read other batches than the run has read"
            )
        saved_world = state.get("world_size", self.world_size)
        epoch, index = state["epoch"], state["batch_index"]
        if saved_world != self.world_size:
            index = -(-index * saved_world // self.world_size)
            if index >= self.num_batches(epoch):
                epoch, index = epoch + 1, 0
            log.info(
                "data position of %d ranks at batch %d of epoch %d: this run of %d starts at "
                "its batch %d of epoch %d",
                *(saved_world, state["batch_index"], state["epoch"], self.world_size, index, epoch),
            )
        elif index and index >= (n_batches := self.num_batches(epoch)):
            log.warning(
                "data position batch %d of epoch %d is past the %d batches the epoch has now: "
                "starting epoch %d",
                *(index, epoch, n_batches, epoch + 1),
            )
            epoch, index = epoch + 1, 0
        self.position = DataPosition(epoch, index)

    def iterate(self, epoch: int, start: int = 0) -> Iterator[Batch]:
        """Batches `start`, `start + 1`, ... of `epoch`: the cursor moved there and read to the
        epoch's end, so these are the batches an uninterrupted run sees."""
        self.restore({"epoch": epoch, "batch_index": start})
        while self.position.epoch == epoch:
            yield next(self)

    def corpus_for(self, epoch: int) -> EncodedCorpus:
        """The token ids that `epoch`'s batches index into."""
        if self.resample is None:
            return self.corpus
        if self._resampled is None or self._resampled[0] != epoch:
            self._resampled = (epoch, self.resample(epoch))
        return self._resampled[1]

    def batch_indices(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of `epoch`, as index arrays into `corpus_for(epoch)`."""
        if self._indices is None or self._indices[0] != epoch:
            corpus = self.corpus_for(epoch)
            batches = make_batches(
                corpus, self.max_tokens, self.seed, epoch, self.pad_to_multiple, self.framing
            )
            self._indices = (epoch, shard_batches(batches, self.rank, self.world_size))
        return self._indices[1]

    def num_batches(self, epoch: int) -> int:
        return len(self.batch_indices(epoch))
