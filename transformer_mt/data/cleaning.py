"""Cleaning: which training pairs are kept, by their encoded lengths, and a report on the
rest. The in-memory corpus and each streamed chunk are cleaned by the same rules; validation
and test sets never are (their references are scored as they are)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


@dataclass(frozen=True)
class CleanReport:
    """How many training pairs were kept and why the others were dropped."""

    total: int
    kept: int
    empty: int  # a side with no tokens (blank after stripping whitespace)
    too_long: int  # a side with more than max_len tokens
    bad_ratio: int  # longer side / shorter side above max_len_ratio

    def __str__(self) -> str:
        return (
            f"kept {self.kept} of {self.total} training pairs; dropped {self.empty} empty, "
            f"{self.too_long} longer than max_len, {self.bad_ratio} above max_len_ratio"
        )

    def __add__(self, other: CleanReport) -> CleanReport:
        """The report of both parts together (a streamed epoch sums its chunks')."""
        counts = [getattr(self, f.name) + getattr(other, f.name) for f in fields(self)]
        return CleanReport(*counts)


def select_training_pairs(
    src_lens: np.ndarray, tgt_lens: np.ndarray, max_len: int, max_len_ratio: float
) -> tuple[np.ndarray, CleanReport]:
    """Indices of the training pairs worth keeping, and a report on the rest.

    Lengths are subword tokens without BOS/EOS. A whitespace-only line encodes to no tokens, so
    "empty" covers blank lines after stripping. Each dropped pair counts under the first rule
    it breaks, in the order empty, too long, ratio.

    Args:
        src_lens, tgt_lens: (N,) integer token counts.
        max_len: longest side allowed.
        max_len_ratio: largest allowed max(len) / min(len).

    Returns:
        (kept indices (K,) int64 ascending, CleanReport)
    """
    src_lens = np.asarray(src_lens, dtype=np.int64)
    tgt_lens = np.asarray(tgt_lens, dtype=np.int64)
    empty = (src_lens == 0) | (tgt_lens == 0)
    too_long = ~empty & ((src_lens > max_len) | (tgt_lens > max_len))
    longer = np.maximum(src_lens, tgt_lens)
    shorter = np.maximum(np.minimum(src_lens, tgt_lens), 1)
    bad_ratio = ~empty & ~too_long & (longer > max_len_ratio * shorter)
    keep = np.flatnonzero(~(empty | too_long | bad_ratio))
    report = CleanReport(
        total=len(src_lens),
        kept=len(keep),
        empty=int(empty.sum()),
        too_long=int(too_long.sum()),
        bad_ratio=int(bad_ratio.sum()),
    )
    return keep, report
