"""Streaming training data (`data.streaming: true`): read lazily, tokenize on the fly, batch.

For corpora that do not fit in memory. What is held does not grow with the corpus: a shuffle
buffer of pairs per reader, the chunks queued for training (`PREFETCH_CHUNKS` per worker)
and the one being read. The in-memory path (`pipeline.encode_splits`,
`cursor.BatchIterator`) encodes the whole corpus first and sorts all of it by length.

    rank r of w takes pair i (0-based, in `dataset.stream_pairs` order) when i % w == r
    its pairs, in order, are cut into chunks of `data.shuffle_buffer` pairs (read, not kept)
    chunk c of epoch e: tokenize -> take out the language tags written in the text
        (`typed_tags`) -> drop by `select_training_pairs` (the in-memory rules) ->
        `make_batches` (shuffle, length sort, cut at `train.max_tokens`, shuffle the batches),
        seeded by (train.seed, rank, c) and e -> `collate` (lengths padded to multiples of
        `train.pad_to_multiple`, within the chunk's longest row)
    the chunks of every epoch in order, epoch after epoch, without end

Each pair therefore lands in one batch per epoch on one rank; ranks read at their own pace
(their batch counts differ), which the endless stream allows: every rank always has a next
batch for the next update. Chunk boundaries count pairs read rather than pairs kept, so a
position is found again without tokenizing what came before it.

With `data.workers` W > 0, a torch DataLoader runs W processes over `ChunkStream`: the k-th
chunk after the start position goes to worker k % W, and the DataLoader hands out its workers'
items round robin, which is the chunk order again. The batches are thus the same for any W,
and each worker tokenizes one chunk in W while the training step runs. Every worker reads (not
tokenizes) the whole corpus, since a text file cannot be split without reading it.

Exact resume: `StreamingBatches.state()` is (epoch, chunk, batch index) of the next batch,
which a checkpoint stores for each rank. On restore the stream restarts at that chunk: the
readers skip the pairs before it untokenized (reading them costs about as long as `wc -l`
plus parsing a TSV or JSON line each), tokenize that one chunk, and rebuild its batches, from
which the first `batch_index` are skipped. The shuffle needs no saved generator state: it is
a pure function of (seed, rank, chunk, epoch). A run of another rank count resumes near the
position instead (`StreamingBatches.restore`).

Batch.indices holds the pairs' numbers in the corpus (i above), not rows of a cleaned corpus.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from transformer_mt.config import DataConfig
from transformer_mt.data.batching import (
    Batch,
    BatchingError,
    collate,
    make_batches,
    oversized_pair,
    pair_too_long,
)
from transformer_mt.data.cleaning import CleanReport, select_training_pairs
from transformer_mt.data.dataset import (
    describe_split,
    pair_origin,
    stream_pairs,
)
from transformer_mt.data.encoding import EncodedCorpus
from transformer_mt.data.readers import DataError
from transformer_mt.data.specials import OWN_FRAMING, Framing
from transformer_mt.data.stream_workers import leave_signals_to_the_trainer
from transformer_mt.data.token_column import TokenColumn
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.data.typed_tags import log_taken_out, training_tags
from transformer_mt.errors import TmtError

log = logging.getLogger(__name__)

PREFETCH_CHUNKS = 2  # chunks each worker tokenizes ahead of training


@dataclass(frozen=True)
class StreamPosition:
    """The next batch to read: batch `batch_index` of chunk `chunk` of epoch `epoch`."""

    epoch: int = 0
    chunk: int = 0
    batch_index: int = 0


@dataclass(frozen=True)
class Chunk:
    """One shuffle buffer, tokenized, cleaned and cut into batches in reading order.

    Workers send it as flat NumPy arrays: the padded tensors of a batch are built by `batch`
    in the training process (a fraction of a millisecond), which keeps them out of the pipe
    and out of shared memory, where each tensor would hold a file descriptor.
    """

    epoch: int
    chunk: int
    corpus: EncodedCorpus  # the kept pairs of the chunk
    report: CleanReport  # what cleaning kept and dropped
    numbers: np.ndarray  # (N,) int64 each kept pair's number in the corpus
    batches: list[np.ndarray]  # rows of `corpus` per batch, in reading order
    tags: int = 0  # language tags written in the text of its pairs, taken out

    def batch(self, index: int, framing: Framing, pad_to_multiple: int = 1) -> Batch:
        rows = self.batches[index]
        batch = collate(self.corpus, rows, framing, pad_to_multiple)
        return dataclasses.replace(batch, indices=torch.from_numpy(self.numbers[rows]))


@dataclass(frozen=True)
class ReadFailure:
    """A worker's error (an unreadable corpus, a pair over the token budget), sent on to the
    training process."""

    error: TmtError


@dataclass(frozen=True)
class StreamSettings:
    """What a reader needs: the corpus, the cleaning and batching rules, and its shard."""

    data: DataConfig
    max_tokens: int  # train.max_tokens
    seed: int  # train.seed
    rank: int = 0
    world_size: int = 1
    pad_to_multiple: int = 1  # train.pad_to_multiple


class ChunkStream(IterableDataset):
    """This rank's chunks (see the module docstring) from `start` on, epoch after epoch.

    Tokenizers pickle as their model bytes (and tables) into worker processes.
    """

    def __init__(
        self,
        settings: StreamSettings,
        src_tok: Tokenizer,
        tgt_tok: Tokenizer,
        start: StreamPosition,
        framing: Framing = OWN_FRAMING,
    ) -> None:
        self.settings = settings
        self.tokenizers = (src_tok, tgt_tok)
        self.start = start
        self.framing = framing  # what `collate` puts around each pair: its budget counts it
        self.tags = training_tags(self.tokenizers, framing.specials)

    def __iter__(self) -> Iterator[Chunk | ReadFailure]:
        """The chunks; an error as a `ReadFailure` item, which the training process raises
        as it is (a DataLoader would wrap it in the worker's traceback)."""
        try:
            yield from self._read()
        except TmtError as err:
            yield ReadFailure(err)

    def _read(self) -> Iterator[Chunk]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        src_tok, tgt_tok = self.tokenizers
        epoch, first = self.start.epoch, self.start.chunk
        offset = -first  # chunk c of `epoch` is item offset + c of this stream
        while True:
            n_chunks = 0
            for chunk, pairs in self._rank_chunks(first, offset, worker, workers):
                n_chunks += 1
                if pairs is not None:
                    yield self._chunk(pairs, epoch, chunk, src_tok, tgt_tok)
            epoch, first, offset = epoch + 1, 0, offset + n_chunks

    def _rank_chunks(
        self, first: int, offset: int, worker: int, workers: int
    ) -> Iterator[tuple[int, list[tuple[int, str, str, int]] | None]]:
        """Every chunk number of one pass over the corpus, with its (pair number, source,
        target, direction) for the chunks this worker tokenizes (from `first` on) and None
        for the others, whose pairs are read but not kept.

        Raises:
            DataError: this rank gets no pair.
        """
        rank, world_size = self.settings.rank, self.settings.world_size
        size = self.settings.data.shuffle_buffer
        chunk, taken, pairs = 0, 0, []

        def mine(chunk: int) -> bool:
            return chunk >= first and (offset + chunk) % workers == worker

        keep = mine(0)
        for number, (src, tgt, direction) in enumerate(stream_pairs(self.settings.data, "train")):
            if number % world_size != rank:
                continue
            if taken and taken % size == 0:
                yield chunk, (pairs if keep else None)
                chunk, pairs = chunk + 1, []
                keep = mine(chunk)
            if keep:
                pairs.append((number, src, tgt, direction))
            taken += 1
        if not taken:
            raise DataError(
                f"{describe_split(self.settings.data)}: no training pair for rank {rank} of "
                f"{world_size}"
            )
        yield chunk, (pairs if keep else None)

    def _chunk(
        self,
        pairs: list[tuple[int, str, str, int]],
        epoch: int,
        chunk: int,
        src_tok: Tokenizer,
        tgt_tok: Tokenizer,
    ) -> Chunk:
        """Tokenize, clean and batch one chunk's pairs (one SentencePiece thread: the
        training process keeps the cores)."""
        numbers = np.fromiter((p[0] for p in pairs), np.int64, len(pairs))
        encoded, tags = EncodedCorpus(
            TokenColumn.from_lists(src_tok.encode_batch([p[1] for p in pairs], num_threads=1)),
            TokenColumn.from_lists(tgt_tok.encode_batch([p[2] for p in pairs], num_threads=1)),
            np.fromiter((p[3] for p in pairs), np.int64, len(pairs)),
        ).without_tags(self.tags)
        data = self.settings.data
        keep, report = select_training_pairs(
            encoded.src.lengths, encoded.tgt.lengths, data.max_len, data.max_len_ratio
        )
        encoded, numbers = encoded.select(keep), numbers[keep]
        settings = self.settings
        seed = chunk_seed(settings.seed, settings.rank, chunk)
        found = oversized_pair(encoded, self.framing, settings.max_tokens)
        if found is not None:
            source = pairs[int(keep[found[0]])][1]
            where, number = pair_origin(data, int(numbers[found[0]]))
            raise BatchingError(pair_too_long(where, number, source, found[1], settings.max_tokens))
        batches = make_batches(
            encoded, settings.max_tokens, seed, epoch, settings.pad_to_multiple, self.framing
        )
        return Chunk(epoch, chunk, encoded, report, numbers, batches, tags)


def chunk_seed(seed: int, rank: int, chunk: int) -> int:
    """The `make_batches` seed of one chunk of one rank (its epoch is `make_batches`' own)."""
    return int(np.random.SeedSequence([seed % 2**32, rank, chunk]).generate_state(1)[0])


class StreamingBatches:
    """One rank's streamed batches, epoch after epoch: the cursor the training loop reads.

    The streaming twin of `cursor.BatchIterator`, with the same interface: `next(batches)`,
    `position.epoch`, and `state()` / `restore(state)` for checkpoints. Workers start at the
    first `next`, from the position then current.

    Example:
        batches = StreamingBatches(StreamSettings(config.data, 4096, seed=1), tok, tok)
        batches.restore(saved_state)  # {"epoch": 3, "chunk": 12, "batch_index": 40, ...}
        batch = next(batches)
    """

    def __init__(
        self,
        settings: StreamSettings,
        src_tok: Tokenizer,
        tgt_tok: Tokenizer,
        framing: Framing = OWN_FRAMING,
    ) -> None:
        self.settings = settings
        self.tokenizers = (src_tok, tgt_tok)
        self.framing = framing
        self.position = StreamPosition()
        self._chunks: Iterator[Chunk | ReadFailure] | None = None
        self._chunk: Chunk | None = None
        self._report: CleanReport | None = None  # the chunks read of the current epoch

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        """The batch at `position`; the position moves to the one after it (into the next
        chunk, and the next epoch, after a chunk's last batch)."""
        if self._chunk is None:
            self._open()
        assert self._chunk is not None
        epoch, chunk, index = dataclasses.astuple(self.position)
        batch = self._chunk.batch(index, self.framing, self.settings.pad_to_multiple)
        self.position = StreamPosition(epoch, chunk, index + 1)
        if self.position.batch_index >= len(self._chunk.batches):
            self._next_chunk()
        return batch

    def state(self) -> dict[str, int]:
        """The position as plain data, with the rank count it belongs to (a checkpoint's)."""
        return {**dataclasses.asdict(self.position), "world_size": self.settings.world_size}

    def restore(self, state: dict[str, int]) -> None:
        """Continue from a position returned by `state`, of this or another rank count.

        Chunk c of each of w ranks starts near pair c * shuffle_buffer * w of the corpus (rank
        r reads pairs r, r + w, ...). Another rank count w' restarts the epoch at the chunk
        that begins at or before that pair, (c * w) // w', batch 0: given the position of the
        rank that is furthest behind (`artifacts.rank_position`), no pair of the epoch is
        skipped, and at most the pairs of one chunk per rank are read twice.
        """
        position = StreamPosition(state["epoch"], state["chunk"], state["batch_index"])
        saved_world, world = state["world_size"], self.settings.world_size
        if saved_world != world:
            position = StreamPosition(position.epoch, position.chunk * saved_world // world)
            log.info(
                "streaming position of %d ranks at chunk %d of epoch %d: this run of %d ranks "
                "starts at its chunk %d",
                *(saved_world, state["chunk"], position.epoch, world, position.chunk),
            )
        self.position = position
        self._chunks = self._chunk = None  # workers restart there at the next batch

    def _open(self) -> None:
        """Start the readers at `position` and skip to its batch; the chunk there has its
        unknown pieces counted (`EncodedCorpus.check_unknowns`), and the language tags written
        in its text."""
        stream = ChunkStream(self.settings, *self.tokenizers, self.position, self.framing)
        workers = self.settings.data.workers
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        if usable is not None and workers > usable:
            log.warning(
                "data.workers=%d readers on the %d CPU(s) this process may use: they and "
                "training share them",
                *(workers, usable),
            )
        with warnings.catch_warnings():  # said above in one line; torch says it in two
            warnings.filterwarnings("ignore", "This DataLoader will create", UserWarning)
            loader = DataLoader(
                stream,
                batch_size=None,  # items are whole chunks already
                num_workers=workers,
                collate_fn=_unchanged,
                prefetch_factor=PREFETCH_CHUNKS if workers else None,
                # Its own generator: a DataLoader iterator draws its workers' base seed from
                # the global torch generator otherwise, which would shift the dropout masks of
                # a resumed run (the draw comes at another step). Nothing here uses the seed.
                generator=torch.Generator().manual_seed(0),
                worker_init_fn=leave_signals_to_the_trainer,
            )
            self._chunks = iter(loader)
        self._chunk = self._fetch()
        where = describe_split(self.settings.data)
        self._chunk.corpus.check_unknowns(where, self.tokenizers)
        log_taken_out(f"data.train {where} (streamed, chunk {self._chunk.chunk})", self._chunk.tags)
        self._report = self._chunk.report
        if self.position.batch_index >= len(self._chunk.batches):
            self._next_chunk()

    def _next_chunk(self) -> None:
        """Move to batch 0 of the next chunk that has batches.

        Raises:
            DataError: a whole epoch went by without a batch (every pair dropped by cleaning).
        """
        empty_since = None
        while True:
            chunk = self._fetch()
            self._count(chunk)
            self._chunk = chunk
            self.position = StreamPosition(chunk.epoch, chunk.chunk, 0)
            if chunk.batches:
                return
            empty_since = empty_since or (chunk.epoch, chunk.chunk)
            if chunk.epoch > empty_since[0] and chunk.chunk >= empty_since[1]:
                raise DataError(
                    f"{describe_split(self.settings.data)}: no training pairs left after "
                    "cleaning (by data.max_len and data.max_len_ratio)"
                )

    def _fetch(self) -> Chunk:
        """The next chunk from the readers.

        Raises:
            DataError: a reader's corpus error (a malformed line, unequal line counts).
            BatchingError: a kept pair alone is over train.max_tokens.
        """
        assert self._chunks is not None
        item = next(self._chunks)
        if isinstance(item, ReadFailure):
            # The readers are stopped now (a next batch reopens them at `position`): the
            # error's traceback keeps this object alive, and readers left to the garbage
            # collector took 5 s each to stop, their queues gone before the request to stop.
            self._chunks = self._chunk = None
            raise item.error
        return item

    def _count(self, chunk: Chunk) -> None:
        """Add the chunk's cleaning to its epoch's report; log the report at an epoch end."""
        assert self._chunk is not None and self._report is not None
        if chunk.epoch == self._chunk.epoch:
            self._report += chunk.report
            return
        log.info("epoch %d (streamed): %s", self._chunk.epoch, self._report)
        self._report = chunk.report


def _unchanged(item: Chunk | ReadFailure) -> Chunk | ReadFailure:
    """The DataLoader's collate function: a chunk is passed on as the worker made it."""
    return item


def sample_pairs(
    pairs: Iterable[tuple[str, str, int]], size: int, seed: int = 0
) -> tuple[list[str], list[str]]:
    """A uniform sample of at most `size` pairs, in one pass holding only the sample (reservoir
    sampling, Vitter's algorithm R): what a streamed corpus trains its tokenizer on
    (`tokenizer.input_sentence_size`). Seeded, so the same corpus gives the same sample and a
    trained tokenizer is found again by its hash.

    Returns:
        (source texts, target texts), in corpus order.
    """
    rng = random.Random(seed)
    reservoir: list[tuple[int, str, str]] = []
    for number, (src, tgt, _) in enumerate(pairs):
        if number < size:
            reservoir.append((number, src, tgt))
        elif (slot := rng.randrange(number + 1)) < size:
            reservoir[slot] = (number, src, tgt)
    reservoir.sort()
    return [src for _, src, _ in reservoir], [tgt for _, _, tgt in reservoir]
