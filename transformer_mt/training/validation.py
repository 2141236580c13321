"""Validation: teacher-forced loss on the valid set, and BLEU of its greedy translations.

BLEU is sacrebleu's corpus BLEU on detokenized text: hypotheses are decoded back to text by the
target tokenizer and compared with the raw reference lines, so the number is comparable to
published scores computed the same way. Validation always searches greedily (beam size 1):
beam search would make every validation several times slower for a ranking of checkpoints
that greedy BLEU already gives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import sacrebleu
import torch

from transformer_mt.config import DecodeConfig
from transformer_mt.data.batching import Batch, SourceBatch, restore_order
from transformer_mt.data.tokenizer import PAD_ID, Tokenizer
from transformer_mt.search import search
from transformer_mt.training.loss import label_smoothed_loss, perplexity


@dataclass
class ValidResult:
    loss: float  # label-smoothed, per target token
    nll: float  # per target token, nats
    ppl: float
    bleu: float | None  # None when BLEU is switched off (train.valid_bleu: false)

    def as_dict(self) -> dict[str, float | None]:
        return dataclasses.asdict(self)


@torch.no_grad()
def valid_loss(
    model: torch.nn.Module,
    batches: Sequence[Batch],
    label_smoothing: float,
    device: torch.device,
    autocast: Callable[[], AbstractContextManager],
) -> tuple[float, float]:
    """Mean label-smoothed loss and NLL per non-pad target token over all `batches`."""
    total_loss = total_nll = 0.0
    tokens = 0
    for batch in batches:
        batch = batch.to(device)
        with autocast():
            logits = model(batch.src_ids, batch.tgt_in_ids, batch.src_mask)
        sums = label_smoothed_loss(logits, batch.tgt_out_ids, label_smoothing, PAD_ID)
        total_loss += sums.loss.item()
        total_nll += sums.nll.item()
        tokens += sums.n_tokens
    return total_loss / max(tokens, 1), total_nll / max(tokens, 1)


def greedy_bleu(
    model: torch.nn.Module,
    source_batches: Sequence[SourceBatch],
    references: Sequence[str],
    tgt_tokenizer: Tokenizer,
    decode_cfg: DecodeConfig,
    device: torch.device,
) -> float:
    """Corpus BLEU of greedy translations of `source_batches` against `references`.

    Args:
        source_batches: from `make_source_batches`; their `indices` index `references`.
        references: raw target lines, one per source sentence.
        decode_cfg: length limits (max_len_a, max_len_b, min_len); beam settings are ignored.
    """
    cfg = dataclasses.replace(decode_cfg, beam_size=1, n_best=1, sampling=False)
    indices: list[int] = []
    hypotheses: list[str] = []
    for batch in source_batches:
        batch = batch.to(device)
        for result in search(model, batch.src_ids, batch.src_mask, cfg):
            hypotheses.append(tgt_tokenizer.decode(result.best.tokens))
        indices.extend(batch.indices.tolist())
    ordered = restore_order(indices, hypotheses)
    return sacrebleu.corpus_bleu(ordered, [list(references)]).score


def validate(
    model: torch.nn.Module,
    loss_batches: Sequence[Batch],
    source_batches: Sequence[SourceBatch] | None,
    references: Sequence[str],
    tgt_tokenizer: Tokenizer,
    decode_cfg: DecodeConfig,
    label_smoothing: float,
    device: torch.device,
    autocast: Callable[[], AbstractContextManager],
) -> ValidResult:
    """Loss, NLL, perplexity and (when `source_batches` is given) greedy BLEU, in eval mode."""
    was_training = model.training
    model.eval()
    try:
        loss, nll = valid_loss(model, loss_batches, label_smoothing, device, autocast)
        bleu = None
        if source_batches is not None:
            with autocast():
                bleu = greedy_bleu(
                    model, source_batches, references, tgt_tokenizer, decode_cfg, device
                )
    finally:
        model.train(was_training)
    return ValidResult(loss, nll, perplexity(nll), None if bleu is None else float(bleu))
