"""Validation: teacher-forced loss on the valid set, and BLEU of its greedy translations.

The translations come from the same `Translator` as `tmt translate` (same truncation, EOS,
batching, length cap and detokenization) and are scored by `evaluation` against the raw
reference lines: sacrebleu's corpus BLEU on detokenized text, comparable to published scores
computed the same way and equal to `tmt translate` + `tmt evaluate` of a greedy search: the
search runs in float32 as `tmt translate` does, whatever precision training runs in (the loss
is measured as training measures it, under its autocast).
Validation always searches greedily (beam size 1): beam search would make every validation
several times slower for a ranking of checkpoints that greedy BLEU already gives.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

from transformer_mt.config import GREEDY, DecodeConfig, ExperimentConfig
from transformer_mt.data.batching import Batch
from transformer_mt.data.pipeline import TrainData
from transformer_mt.data.specials import SpecialTokens
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.evaluation import bleu_tokenize, corpus_scores
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.translator import Translator
from transformer_mt.model import Seq2SeqTransformer
from transformer_mt.training.loss import label_smoothed_loss, perplexity


@dataclass
class ValidResult:
    loss: float  # label-smoothed, per target token
    nll: float  # per target token, nats
    ppl: float
    bleu: float | None  # None when BLEU is switched off (train.valid_bleu: false)
    seconds: float  # wall time of the whole validation: what it takes from training

    @property
    def score(self) -> float:
        """Higher is better: BLEU, or minus the NLL when BLEU is off (early stopping, best.pt)."""
        return self.bleu if self.bleu is not None else -self.nll

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
    """Mean label-smoothed loss and NLL per non-pad target token over all `batches`, summed on
    the device and read once at the end."""
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss, nll, tokens
    for batch in batches:
        batch = batch.to(device, non_blocking=True)
        with autocast():
            logits = model(batch.src_ids, batch.tgt_in_ids, batch.src_mask)
        sums = label_smoothed_loss(logits, batch.tgt_out_ids, label_smoothing, model.pad_id)
        totals += torch.stack([sums.loss.double(), sums.nll.double(), sums.n_tokens.double()])
    total_loss, total_nll, tokens = totals.tolist()
    return total_loss / max(tokens, 1), total_nll / max(tokens, 1)


def greedy_bleu(
    model: Seq2SeqTransformer,
    sources: Sequence[str],
    references: Sequence[str],
    tokenizers: tuple[Tokenizer, Tokenizer],
    specials: SpecialTokens,
    decode_cfg: DecodeConfig,
    device: torch.device,
    languages: tuple[str | None, str | None] = (None, None),
) -> float:
    """Corpus BLEU of the greedy translations of the raw `sources` against `references`.

    Args:
        references: raw target lines, one per source line.
        tokenizers: (source, target).
        specials: the model's special ids.
        languages: (source, target) for a model with language tags (`Translator`).
        decode_cfg: length limits (max_len_a, max_len_b, min_len) and batch size; beam and
            sampling settings are ignored.
    """
    lines = LineSettings(src_lang=languages[0], tgt_lang=languages[1])
    translator = Translator(
        model,
        tokenizers,
        dataclasses.replace(decode_cfg, **GREEDY),
        device=device,
        lines=lines,
        specials=specials,
    )
    hypotheses = [t.texts[0] for t in translator.translate(sources)]
    tokenize = bleu_tokenize(languages[1])  # 13a for a language written with spaces
    return corpus_scores(hypotheses, references, ["bleu"], tokenize=tokenize)[0].score


def validate(
    model: Seq2SeqTransformer,
    data: TrainData,
    tokenizers: tuple[Tokenizer, Tokenizer],
    specials: SpecialTokens,
    config: ExperimentConfig,
    device: torch.device,
    autocast: Callable[[], AbstractContextManager],
) -> ValidResult:
    """Loss, NLL, perplexity and (with train.valid_bleu) greedy BLEU on `data`'s valid set, in
    eval mode; `config` gives the label smoothing, the decode length limits and the languages.
    """
    started = time.perf_counter()
    was_training = model.training
    model.eval()
    try:
        smoothing = config.train.label_smoothing
        loss, nll = valid_loss(model, data.valid_batches, smoothing, device, autocast)
        bleu = None
        if config.train.valid_bleu and data.valid_sources is not None:
            languages = (config.data.src_lang, config.data.tgt_lang)
            bleu = greedy_bleu(  # in float32, as `tmt translate` searches, not under autocast
                model,
                data.valid_sources,
                data.valid_references,
                tokenizers,
                specials,
                config.decode,
                device,
                languages,
            )
    finally:
        model.train(was_training)
    seconds = time.perf_counter() - started  # both parts end in a read: the device is done
    return ValidResult(loss, nll, perplexity(nll), None if bleu is None else float(bleu), seconds)
