"""Greedy, beam and sampling search over the decoding protocol.

Search sees a model only through `DecodingModel`: `encode` once per batch (one memory row per
sentence), then `decode_step` once per output position with the last token of every row, the
sentence each row reads (row // K for beams, row // samples for samples) and an explicit cache
that search reorders. All rows of a step (sentences x beams, or sentences x samples) are
decoded as one tensor. A sentence whose search is over leaves the batch: its rows, its memory
and source mask, and its sources in the cache are dropped, so one long sentence does not keep
the work of the short ones alive.

The modes are beam.py (`beam_search`, `beam_step`) and sampling.py (`greedy_search`,
`sample`); what they share is named by its module: protocol.py (what search needs of a
model), options.py (`SearchOptions`: special ids, length cap, first cache, shortlist),
lengths.py (the length penalty and max_len), beam_state.py (`BeamState`, the live
hypotheses), constraints.py (lexical constraints and the banks of dynamic beam allocation),
rows.py (the model's rows kept aligned with them), results.py (hypotheses and n-best lists)
and topk.py (top-k by chunks).

Definitions, in the names of `DecodeConfig`:

    |x|        source length: real source tokens (True entries of src_mask; the source EOS
               counts, padding does not).
    |y|        hypothesis length: generated tokens, EOS included when the hypothesis ends with
               it. BOS is the first decoder input, not an output, and is never counted.
    log P(y|x) sum of the model's log-probs of those |y| tokens (EOS included).
    score(y)   log P(y|x) / lp(|y|), the key finished hypotheses are ranked by, where
                   lp(n) = ((5 + n) / 6) ** length_penalty    length_norm: gnmt
                                                              (Wu et al. 2016, eq. 14)
                   lp(n) = n                                  length_norm: average
                   lp(n) = n ** length_penalty                length_norm: power
                   lp(n) = 1                                  length_norm: none
    prefix     forced target tokens a hypothesis must start with (the user typed them): while
               inside it, every other token is forbidden; its tokens count in |y| and log P,
               and max_len(x) is raised to at least |prefix| + 1.
    constraints target phrases each translation must contain, each as a contiguous run
               (beam search only; search/constraints.py): EOS is forbidden until a hypothesis
               has met them all, and max_len(x) is raised to at least |prefix| + their tokens
               + 1, a length by which they can all be met.
    max_len(x) max(1, floor(max_len_a * |x| + max_len_b)): the most tokens a hypothesis may
               generate, EOS included. One that reaches max_len tokens without EOS is finished as
               it is (no EOS is forced), so a translation never exceeds max_len tokens; one
               that leaves constraints unmet then is kept only to fill the n-best list, ranked
               after every hypothesis that meets them all (`Hypothesis.unmet`).
    min_len    EOS is forbidden while fewer than min_len tokens have been generated, so every
               translation has at least min(min_len, max_len) tokens.

PAD and BOS are never generated. Beam search (beam_size = K) keeps K live hypotheses per sentence.
Each step ranks the 2K best one-token expansions of them: an EOS expansion among the first K is
finished (as in fairseq: one ranked lower would not have entered the beam) and the K best
non-EOS expansions live on. A sentence is done once it reaches max_len, or once it has K
finished hypotheses and, by the rule of early_stopping, no live one can displace them:
    k_finished  none is tried (a longer hypothesis the length penalty would have preferred can
                be missed);
    heuristic   the best live hypothesis' log P / lp(its length so far) is no better than the
                K-th best finished score;
    never       the same with lp(max_len(x)) when that is larger (when lp grows with length);
and it returns its n_best finished hypotheses of highest score. With
constraints, the candidates also hold each beam's best token and its next token of every
unmet constraint, and the beam takes them in the order of dynamic beam allocation (banks by
constraint tokens met) instead of by score; a sentence without constraints in such a batch is
searched exactly as without. Greedy search is the same rule with one row per sentence;
sampling draws n_best independent samples.

The caller puts the model in eval mode; search runs under `torch.inference_mode()`.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from transformer_mt.config import DecodeConfig
from transformer_mt.errors import SettingError
from transformer_mt.search.beam import beam_search, beam_step
from transformer_mt.search.constraints import Phrases, constrained_beam_size
from transformer_mt.search.lengths import length_penalty, max_output_lengths
from transformer_mt.search.options import DEFAULT_OPTIONS, SearchOptions, SpecialIds
from transformer_mt.search.protocol import DecodingModel, ReorderableCache
from transformer_mt.search.results import Hypothesis, SearchResult
from transformer_mt.search.sampling import greedy_search, sample
from transformer_mt.search.topk import top_k

__all__ = [
    "DecodingModel",
    "Hypothesis",
    "ReorderableCache",
    "SearchOptions",
    "SearchResult",
    "SpecialIds",
    "beam_search",
    "beam_step",
    "constrained_beam_size",
    "greedy_search",
    "length_penalty",
    "max_output_lengths",
    "sample",
    "search",
    "top_k",
]


def search(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    options: SearchOptions = DEFAULT_OPTIONS,
    prefixes: Sequence[Sequence[int]] | None = None,
    constraints: Sequence[Phrases] | None = None,
) -> list[SearchResult]:
    """Sampling if `cfg.sampling`, else greedy search if `cfg.beam_size == 1`, else beam search;
    beam search whatever the beam size when a sentence has constraints.

    Args and Returns: as `beam_search`.
    `prefixes`: per sentence, target ids every hypothesis starts with (forced decoding).
    `constraints`: per sentence, target phrases every translation contains (beam search;
    `constrained_beam_size` is the beam that suits a sentence's number of them).
    `options.max_len_cap` bounds every max_len (a model cannot decode past its position table).

    Raises:
        SettingError: constraints with sampling.
    """
    constrained = constraints is not None and any(any(c) for c in constraints)
    if cfg.sampling:
        if constrained:
            raise SettingError("sampling", None, "constraints are met by beam search only")
        return sample(model, src_ids, src_mask, cfg, options, prefixes)
    if cfg.beam_size == 1 and not constrained:
        return greedy_search(model, src_ids, src_mask, cfg, options, prefixes)
    return beam_search(model, src_ids, src_mask, cfg, options, prefixes, constraints)
