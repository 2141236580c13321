"""Greedy search and sampling: one row per (sentence, sample), a `choose` rule per step."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from transformer_mt.config import DecodeConfig
from transformer_mt.search.options import DEFAULT_OPTIONS, SearchOptions
from transformer_mt.search.protocol import DecodingModel
from transformer_mt.search.results import (
    Ended,
    Hypothesis,
    SearchResult,
    collect_finished,
    ranked_results,
)
from transformer_mt.search.rows import Forced, drop_done, next_log_probs, start_rows
from transformer_mt.search.topk import top_k


def greedy_search(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    options: SearchOptions = DEFAULT_OPTIONS,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> list[SearchResult]:
    """The most probable next token at every step; one hypothesis per sentence.

    Independent of `beam_search` (which it must equal at beam_size 1) so that each can test the
    other. Args and Returns as `beam_search`; cfg.beam_size and cfg.n_best are not used.
    """
    return _decode_rows(model, src_ids, src_mask, cfg, options, 1, _argmax, prefixes)


def sample(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    options: SearchOptions = DEFAULT_OPTIONS,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> list[SearchResult]:
    """Draw cfg.n_best samples per sentence from the filtered next-token distributions.

    Each step divides the log-probs by cfg.temperature, keeps the cfg.top_k most probable tokens
    (0: all), then the smallest set of most probable tokens holding cfg.top_p of the mass, and
    draws from what is left. Hypothesis scores use the model's own (unfiltered, untempered)
    log-probs, so samples and beams are scored alike.

    Args and Returns as `beam_search`. The draws come from `options.generator` where one is
    given, else from a generator seeded by cfg.seed and the batch's sources (`batch_seed`):
    the same batch gives the same samples in every run, whatever ran before it.
    """
    generator = options.generator or torch.Generator(src_ids.device).manual_seed(
        batch_seed(cfg.seed, src_ids)
    )
    choose = _sampler(cfg, generator)
    return _decode_rows(model, src_ids, src_mask, cfg, options, cfg.n_best, choose, prefixes)


def batch_seed(seed: int, src_ids: Tensor) -> int:
    """A 63-bit seed from `seed` and the ids of a batch of sources (B, S): the hash of their
    bytes, so that a batch of other sentences draws otherwise."""
    digest = hashlib.blake2b(src_ids.cpu().numpy().tobytes(), digest_size=8, key=b"tmt-sampling")
    digest.update(seed.to_bytes(8, "little"))
    return int.from_bytes(digest.digest(), "little") >> 1


def _decode_rows(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    options: SearchOptions,
    samples: int,
    choose: Callable[[Tensor], Tensor],
    prefixes: Sequence[Sequence[int]] | None,
) -> list[SearchResult]:
    """One row per (sentence, sample): `choose` maps (R, V) log-probs to (R,) next tokens."""
    ids = options.ids
    finished: list[list[Hypothesis]] = [[] for _ in range(src_ids.shape[0])]
    with torch.inference_mode():
        forced = Forced(prefixes)
        state, rows = start_rows(
            model, src_ids, src_mask, cfg, options, beam_size=1, samples=samples, forced=forced
        )
        while state.sentence_ids.numel():
            log_probs = next_log_probs(model, state, rows, ids.bos)  # (R, V)
            # In place: the log-probs are the caller's own (`DecodingModel.decode_step`).
            log_probs = state.forbid(log_probs[:, None], cfg, ids)[:, 0]
            tokens = choose(log_probs)  # (R,)
            state.scores = state.scores + log_probs.gather(1, tokens[:, None])  # (R, 1)
            done = (tokens == ids.eos) | (state.max_lens <= state.steps + 1)
            ended = done.nonzero().squeeze(1)
            if ended.numel():
                hypotheses = Ended(
                    state.sentence_ids[ended],
                    state.tokens[ended],
                    state.steps[ended],
                    tokens[ended],
                    state.scores[ended, 0],
                )
                collect_finished(finished, hypotheses, cfg, ids.eos)
            state.append(tokens)
            drop_done(state, rows, done, beam_rows=None)
    return ranked_results(finished, samples)


def _argmax(log_probs: Tensor) -> Tensor:
    """(R, V) -> (R,): the best token of each row (torch's argmax inspects every entry one by
    one, 4x `top_k`'s time at 64 rows of 8,000)."""
    return top_k(log_probs, 1)[1][:, 0]


def _sampler(cfg: DecodeConfig, generator: torch.Generator | None) -> Callable[[Tensor], Tensor]:
    """A `choose` function drawing from the temperature / top-k / top-p filtered distribution."""

    def choose(log_probs: Tensor) -> Tensor:
        logits = log_probs / cfg.temperature  # (R, V)
        if cfg.top_k > 0:
            kth_best = logits.topk(min(cfg.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth_best, float("-inf"))
        if cfg.top_p < 1.0:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(dim=-1)
            # Drop a token once the tokens ranked above it already hold top_p of the mass; the
            # most probable token always stays.
            drop = probs.cumsum(dim=-1) - probs >= cfg.top_p
            drop[:, 0] = False  # kept even where top_p is below float32's least (1.4e-45)
            logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
        probs = logits.softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    return choose
