"""Greedy search and sampling: one row per (sentence, sample), a `choose` rule per step."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np
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

    Each sample draws from a stream of its own, keyed by cfg.seed, its sentence's ids and its
    number (`sample_keys`): the same sentence gives the same samples in every run, alone or in
    a batch of any others, in any order. Args and Returns as `beam_search`.
    """
    choose = _sampler(cfg, sample_keys(cfg.seed, src_ids, src_mask, cfg.n_best))
    return _decode_rows(model, src_ids, src_mask, cfg, options, cfg.n_best, choose, prefixes)


def sample_keys(seed: int, src_ids: Tensor, src_mask: Tensor, samples: int) -> np.ndarray:
    """(B * samples,) uint64: the key of sample j of sentence b at b * samples + j, a hash of
    `seed`, the sentence's own ids (its padding left out) and j."""
    real = src_mask.reshape(src_ids.shape[0], -1).cpu()
    ids = src_ids.cpu()
    keys = []
    for b in range(ids.shape[0]):
        own = ids[b][real[b]].numpy().astype("<i8").tobytes()
        sentence = hashlib.blake2b(own, digest_size=8, key=b"tmt-sampling")
        for j in range(samples):
            digest = sentence.copy()  # the sentence's ids hashed once, for all its samples
            digest.update(seed.to_bytes(8, "little") + j.to_bytes(8, "little"))
            keys.append(int.from_bytes(digest.digest(), "little"))
    return np.array(keys, dtype=np.uint64)


def uniforms(keys: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """(R,) float64 in [0, 1): draw number `steps[r]` of the stream keyed `keys[r]`, the
    SplitMix64 generator's output (Steele et al., 2014) at that place: a function of the key
    and the step alone, so that no row's draws depend on the rows beside it."""
    with np.errstate(over="ignore"):
        x = keys + (steps.astype(np.uint64) + np.uint64(1)) * _GOLDEN_GAMMA
        x = (x ^ (x >> np.uint64(30))) * _MIX_1
        x = (x ^ (x >> np.uint64(27))) * _MIX_2
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53


_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)


# The next token of each row: (R, V) log-probs, each row's unit (R,) (its sentence and sample,
# numbered b * samples + j at the start) and its step (R,) -> (R,) token ids.
Choose = Callable[[Tensor, Tensor, Tensor], Tensor]


def _decode_rows(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    options: SearchOptions,
    samples: int,
    choose: Choose,
    prefixes: Sequence[Sequence[int]] | None,
) -> list[SearchResult]:
    """One row per (sentence, sample): `choose` picks each row's next token."""
    ids = options.ids
    finished: list[list[Hypothesis]] = [[] for _ in range(src_ids.shape[0])]
    with torch.inference_mode():
        forced = Forced(prefixes)
        state, rows = start_rows(
            model, src_ids, src_mask, cfg, options, beam_size=1, samples=samples, forced=forced
        )
        units = torch.arange(state.sentence_ids.numel(), device=src_ids.device)
        while state.sentence_ids.numel():
            log_probs = next_log_probs(model, state, rows, ids.bos)  # (R, V)
            # In place: the log-probs are the caller's own (`DecodingModel.decode_step`).
            log_probs = state.forbid(log_probs[:, None], cfg, ids)[:, 0]
            tokens = choose(log_probs, units, state.steps)  # (R,)
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
            units = units[~done]
    return ranked_results(finished, samples)


def _argmax(log_probs: Tensor, units: Tensor, steps: Tensor) -> Tensor:
    """The best token of each row (torch's argmax inspects every entry one by one, 4x
    `top_k`'s time at 64 rows of 8,000)."""
    return top_k(log_probs, 1)[1][:, 0]


def _sampler(cfg: DecodeConfig, keys: np.ndarray) -> Choose:
    """A `choose` function drawing from the temperature / top-k / top-p filtered distribution,
    each row by the inverse of its distribution function at its own uniform draw (`uniforms`
    of its unit's key, `keys`). With top-k the rows are cut to their k best tokens first, so
    the rest is done on k columns, not the vocabulary's thousands."""

    def choose(log_probs: Tensor, units: Tensor, steps: Tensor) -> Tensor:
        logits = log_probs / cfg.temperature  # (R, V)
        columns = None  # the vocabulary column of each of `logits`' columns, where cut
        if 0 < cfg.top_k < logits.shape[-1]:
            logits, columns = top_k(logits, cfg.top_k)  # (R, k), best first
        if cfg.top_p < 1.0:
            if columns is None:
                logits, columns = logits.sort(dim=-1, descending=True)
            probs = logits.softmax(dim=-1)
            # Drop a token once the tokens ranked above it already hold top_p of the mass; the
            # most probable token always stays.
            drop = probs.cumsum(dim=-1) - probs >= cfg.top_p
            drop[:, 0] = False  # kept even where top_p is below float32's least (1.4e-45)
            logits = logits.masked_fill(drop, float("-inf"))
        cumulative = logits.softmax(dim=-1).double().cumsum(dim=-1)
        drawn = uniforms(keys[units.cpu().numpy()], steps.cpu().numpy())
        targets = torch.from_numpy(drawn).to(cumulative.device) * cumulative[:, -1]
        # The first token whose cumulative mass passes the draw: never one of no mass.
        picked = torch.searchsorted(cumulative, targets[:, None], right=True)
        picked = picked.clamp_(max=cumulative.shape[-1] - 1)
        return (picked if columns is None else columns.gather(1, picked))[:, 0]

    return choose
