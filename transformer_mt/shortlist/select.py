"""The shortlist at search time: the target ids each sentence of a batch may produce, and the
output projection restricted to their union (`model.OutputSubset`).

A sentence's ids are those listed for its source ids, plus the ids every sentence may produce,
plus the ids its search must be able to produce (EOS, its forced prefix, its constraints). The
model scores the batch's union in one product and normalises each row over its own sentence's
ids (`model.OutputSubset`), so a translation does not depend on its batch: with one set per
batch, as CTranslate2 and Marian keep, 198 of 1,000 test2016 translations of the small student
changed between batches of 64 and one sentence at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import TmtError
from transformer_mt.model import OutputSubset
from transformer_mt.model.output_subset import Product
from transformer_mt.shortlist.vmap import Entry, Vocabularies, read_vmap

log = logging.getLogger(__name__)


class Shortlist:
    """Target ids per source id, and the projection rows (float) that score them.

    Args:
        table: (Vs, k) long, the target ids of each source id, right-padded with -1.
        always: (A,) long, ids every sentence may produce.
        weight: (V, D) the full output projection; bias (V,) or None.
    """

    def __init__(
        self,
        table: Tensor,
        always: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        product: Product | None = None,
    ):
        self.table, self.always = table.to(weight.device), always.to(weight.device)
        self.weight, self.bias, self.product = weight, bias, product

    @classmethod
    def load(
        cls,
        path: str | Path,
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        weight: Tensor,
        bias: Tensor | None,
        fixed: Sequence[int] = (),
        product: Product | None = None,
    ) -> Shortlist:
        """Read a vocabulary map file (`vmap`) for a model with these tokenizers; `fixed`:
        ids every sentence may produce besides the file's (the unknown piece's, as CTranslate2
        keeps it); `product`: how a batch's rows are multiplied (`OutputSubset.of`).

        Raises:
            TmtError: as `read_vmap`; a file made for other vocabularies (`check_made_for`);
                a piece a tokenizer lacks (naming file, line and piece); or no target piece
                listed at all.
        """
        vmap = read_vmap(path)
        check_made_for(path, vmap.vocabularies, Vocabularies.of(src_tokenizer, tgt_tokenizer))
        rows: dict[int, list[int]] = {}
        always: list[int] = list(fixed)
        for entry in vmap.entries:
            source = (
                _id(src_tokenizer, entry.source, path, entry, "source") if entry.source else None
            )
            # A piece listed twice changes nothing; kept once, a row is at most the target
            # vocabulary wide (the table is source vocabulary x the widest row).
            targets = list(
                dict.fromkeys(
                    _id(tgt_tokenizer, piece, path, entry, "target")
                    for piece in dict.fromkeys(entry.targets)
                )
            )
            if source is None:
                always += targets
            else:
                rows[source] = targets
        if not any(rows.values()) and len(always) == len(fixed):
            raise TmtError(
                f"{path}: lists no target pieces, so every sentence could produce only the "
                "unknown piece; make one with tmt shortlist"
            )
        width = max((len(targets) for targets in rows.values()), default=0)
        table = torch.full((src_tokenizer.vocab_size, max(width, 1)), -1, dtype=torch.long)
        for source, targets in rows.items():
            table[source, : len(targets)] = torch.tensor(targets, dtype=torch.long)
        return cls(table, torch.tensor(always, dtype=torch.long), weight, bias, product)

    def allowed(self, src_ids: Tensor, needed: Sequence[Sequence[int]]) -> Tensor:
        """(B, V) bool: the target ids each sentence of `src_ids` (B, S) may produce: those
        listed for its source ids, those allowed everywhere and its `needed` ones."""
        batch, vocab = src_ids.size(0), self.weight.size(0)
        listed = self.table[src_ids].reshape(batch, -1)  # (B, S * k), -1 = none
        allowed = torch.zeros(batch, vocab + 1, dtype=torch.bool, device=src_ids.device)
        allowed.scatter_(1, torch.where(listed < 0, vocab, listed), True)  # pads: column V
        allowed = allowed[:, :vocab]
        allowed[:, self.always] = True
        for row, ids in enumerate(needed):
            allowed[row, torch.tensor(ids, dtype=torch.long, device=src_ids.device)] = True
        return allowed

    def __call__(self, src_ids: Tensor, needed: Sequence[Sequence[int]]) -> OutputSubset:
        """`SearchOptions.vocabulary`: the projection restricted to the batch's ids, and the
        ids of each sentence."""
        return OutputSubset.of(self.allowed(src_ids, needed), self.weight, self.bias, self.product)


def check_made_for(path: str | Path, named: Vocabularies | None, model: Vocabularies) -> None:
    """Refuse a shortlist file that names vocabularies other than the `model`'s; a file that
    names none (made elsewhere, or by an older `tmt shortlist`) is used with a warning, its
    pieces checked one by one as it is read.

    Raises:
        TmtError: one line naming the file, the side that differs and how to make one.
    """
    if named is None:
        log.warning(
            "%s: names no vocabularies (made elsewhere or by an older tmt shortlist), so only "
            "its pieces can be checked against the model; tmt shortlist makes one that names "
            "them",
            path,
        )
        return
    sides = named.differing(model)
    if sides:
        differ = "vocabularies are" if len(sides) == 2 else "vocabulary is"
        raise TmtError(
            f"{path}: a shortlist for another model (its {' and '.join(sides)} {differ} not "
            "this model's); make one for this model with tmt shortlist"
        )


def _id(tokenizer: Tokenizer, piece: str, path: str | Path, entry: Entry, side: str) -> int:
    """The id of `piece` in `tokenizer`, or an error naming where the file has it."""
    token = tokenizer.piece_id(piece)
    if tokenizer.id_to_piece(token) != piece:
        raise TmtError(
            f"{path}:{entry.line}: {side} piece {piece!r} is not in the model's "
            f"{side} vocabulary (a shortlist made for another model?)"
        )
    return token
