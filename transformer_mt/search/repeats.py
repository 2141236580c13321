"""No repeated n-grams (`DecodeConfig.no_repeat_ngram_size`): which next tokens would make a
hypothesis hold the same n tokens twice.

A hypothesis whose last n - 1 tokens occurred earlier may not continue with any token that
followed them there. Each step compares every row's last n - 1 tokens with every window of its
own tokens at once, so the cost is one pass over the hypotheses' tokens, not a Python loop over
rows (the rows of one step have different lengths when a server's sentences are not in step).
"""

from __future__ import annotations

import torch
from torch import Tensor


def repeating_tokens(tokens: Tensor, lengths: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The next tokens that would repeat an n-gram, as pairs (row, token).

    Args:
        tokens: (R, W) long; row r's hypothesis is its first lengths[r] tokens (the rest is
            padding, never read).
        lengths: (R,) long.
        n: the n-gram size, >= 1 (1: no token twice).

    Returns:
        rows (M,) and tokens (M,) long: row rows[i] may not produce tokens[i]. A pair may
        come more than once.
    """
    width = tokens.shape[1]
    if width < n:  # no row holds a whole n-gram yet
        empty = tokens.new_empty(0)
        return empty, empty
    windows = tokens.unfold(1, n, 1)  # (R, J, n): window j is tokens[j : j + n]
    starts = torch.arange(windows.shape[1], device=tokens.device)
    inside = starts[None, :] + n <= lengths[:, None]  # (R, J): the window is all hypothesis
    if n > 1:
        # Each row's last n - 1 tokens, at lengths - n + 1 .. lengths - 1 (rows shorter than
        # that have no window inside, so what the clamp reads for them does not count).
        at = lengths[:, None] - (n - 1) + torch.arange(n - 1, device=tokens.device)
        last = tokens.gather(1, at.clamp(min=0))  # (R, n - 1)
        inside &= (windows[:, :, : n - 1] == last[:, None, :]).all(dim=2)
    rows, starts = inside.nonzero(as_tuple=True)
    return rows, windows[rows, starts, n - 1]


def forbid_repeats(log_probs: Tensor, tokens: Tensor, lengths: Tensor, n: int) -> None:
    """-inf, in place in `log_probs` (R, V), for every next token that would repeat an n-gram
    (`repeating_tokens`), except in a row the bans would leave without any allowed token:
    there they are lifted (a hypothesis longer than the vocabulary can say something new to
    a small vocabulary only by repeating), so that every row keeps a way on."""
    rows, banned = repeating_tokens(tokens, lengths, n)
    if not rows.numel():
        return
    before = log_probs[rows, banned]
    log_probs[rows, banned] = float("-inf")
    touched = rows.unique()
    stuck = torch.zeros(log_probs.shape[0], dtype=torch.bool, device=log_probs.device)
    stuck[touched] = ~log_probs[touched].isfinite().any(dim=1)
    lifted = stuck[rows] & before.isfinite()
    if bool(lifted.any()):
        log_probs[rows[lifted], banned[lifted]] = before[lifted]
