"""The tokenised corpus a shortlist is learnt from, read once and held on disk, not in memory.

IBM Model 1 reads the corpus once per EM iteration. Reading and tokenising the text each time
would cost a pass over the files (over the network, for a hub corpus) per iteration; holding
the ids as Python lists cost about 25 KB of memory per pair with the arrays built from them
(6.3 GB at 232,000 pairs, docs/results.md). So each chunk's ids go to a numpy file in a
temporary folder (4 bytes an id) as the corpus is read, and `chunks` reads them back one
chunk at a time: memory holds one chunk whatever the corpus's size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Chunk:
    """Parallel id sequences end to end: pair i's source is `src[src_ends[i-1]:src_ends[i]]`
    (from 0 for the first), its target likewise."""

    src: np.ndarray  # int32
    src_ends: np.ndarray  # int64, one per pair
    tgt: np.ndarray
    tgt_ends: np.ndarray

    @classmethod
    def of(cls, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> Chunk:
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
        return cls(*_flat(sources), *_flat(targets))

    def __len__(self) -> int:
        return len(self.src_ends)

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """The source and the target length of each pair."""
        return np.diff(self.src_ends, prepend=0), np.diff(self.tgt_ends, prepend=0)

    def pairs(self, start: int, stop: int) -> Chunk:
        """Pairs `start` to `stop` (exclusive) as a chunk of their own."""
        src_from = self.src_ends[start - 1] if start else 0
        tgt_from = self.tgt_ends[start - 1] if start else 0
        return Chunk(
            self.src[src_from : self.src_ends[stop - 1]],
            self.src_ends[start:stop] - src_from,
            self.tgt[tgt_from : self.tgt_ends[stop - 1]],
            self.tgt_ends[start:stop] - tgt_from,
        )


class EncodedCorpus:
    """Chunks of pairs spilled to `folder`, with what one pass over them tells: how many pairs,
    how often each target id occurs, which source ids occur.

    Args:
        folder: an empty folder that outlives the reading (a temporary one).
        src_vocab, tgt_vocab: the tokenizers' sizes (the counts' lengths).
    """

    def __init__(self, folder: Path, src_vocab: int, tgt_vocab: int):
        self.folder = folder
        self.files: list[Path] = []
        self.pairs = 0
        self.target_counts = np.zeros(tgt_vocab, dtype=np.int64)
        self.source_seen = np.zeros(src_vocab, dtype=bool)

    def add(self, chunk: Chunk) -> None:
        path = self.folder / f"{len(self.files)}.npz"
        np.savez(
            path, src=chunk.src, src_ends=chunk.src_ends, tgt=chunk.tgt, tgt_ends=chunk.tgt_ends
        )
        self.files.append(path)
        self.pairs += len(chunk)
        self.target_counts += np.bincount(chunk.tgt, minlength=len(self.target_counts))
        self.source_seen[chunk.src] = True

    def chunks(self) -> Iterator[Chunk]:
        """The chunks from the first (a new pass at each call)."""
        for path in self.files:
            with np.load(path) as stored:
                yield Chunk(stored["src"], stored["src_ends"], stored["tgt"], stored["tgt_ends"])


def _flat(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """The ids of `rows` end to end (int32: a vocabulary is under 2**31), and where each row
    ends."""
    ends = np.cumsum([len(row) for row in rows], dtype=np.int64)
    count = int(ends[-1]) if len(ends) else 0
    return np.fromiter((i for row in rows for i in row), dtype=np.int32, count=count), ends
