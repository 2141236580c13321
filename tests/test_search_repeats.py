"""No repeated n-grams and no unknown piece (`DecodeConfig.no_repeat_ngram_size`,
`disable_unk`): the banned tokens against a plain reference, beam search against the exhaustive
ranking of the hypotheses the rules allow, every mode's output free of repeats, a forced prefix
exempt, and a vocabulary too small for the rule."""

import dataclasses
import random

import pytest
import torch

from transformer_mt.config import DecodeConfig
from transformer_mt.search import beam_search, greedy_search, length_penalty, search
from transformer_mt.search.repeats import repeating_tokens

from .search_fakes import EOS, PAD, RecurrentFake, sequence_log_prob
from .test_search import all_hypotheses, padded, random_sources

UNK = 1


def repeats(tokens: list[int], n: int) -> bool:
    """Whether `tokens` holds some n-gram twice."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) < len(grams)


def reference_bans(row: list[int], n: int) -> set[int]:
    """The tokens after which `row` would hold an n-gram twice, by trying each."""
    return {t for t in set(row) if repeats([*row, t], n) and not repeats(row, n)}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_banned_tokens_are_those_that_would_repeat_an_ngram(n):
    rng = random.Random(n)
    lengths = [rng.randrange(0, 12) for _ in range(40)]
    rows = [[rng.randrange(4, 8) for _ in range(k)] for k in lengths]
    rows = [row for row in rows if not repeats(row, n)] + [[]]  # hypotheses the rule allowed
    width = max(len(row) for row in rows)
    tokens = torch.tensor([row + [PAD] * (width - len(row)) for row in rows])
    found, banned = repeating_tokens(tokens, torch.tensor([len(r) for r in rows]), n)
    got = [set() for _ in rows]
    for r, t in zip(found.tolist(), banned.tolist(), strict=True):
        got[r].add(t)
    assert got == [reference_bans(row, n) for row in rows]
    assert any(got)


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("length_norm", ["gnmt", "none"])
def test_wide_beam_finds_the_exhaustive_optimum_among_allowed_hypotheses(n, length_norm):
    """As test_search's exhaustive test, over the hypotheses without the unknown piece and
    without a repeated n-gram."""
    model = RecurrentFake(vocab_size=7, seed=3, sharpness=2.0)
    src = [4, 5, 5]
    cfg = DecodeConfig(max_len_a=0.0, max_len_b=4, min_len=0, length_norm=length_norm)
    allowed = [
        h
        for h in all_hypotheses(7, cfg, max_len=4)
        if UNK not in h and not repeats([t for t in h if t != EOS], n)
    ]
    cfg = dataclasses.replace(
        cfg, beam_size=len(allowed), n_best=5, no_repeat_ngram_size=n, disable_unk=True
    )

    def exhaustive_score(tokens: list[int]) -> float:
        log_p = sequence_log_prob(model, torch.tensor(src), tokens)
        return log_p / length_penalty(len(tokens), cfg)

    ranked = sorted(allowed, key=exhaustive_score, reverse=True)
    (result,) = beam_search(model, *padded([src]), cfg)
    assert [h.tokens + [EOS] * h.has_eos for h in result.hypotheses] == ranked[:5]
    assert [h.score for h in result.hypotheses] == pytest.approx(
        [exhaustive_score(t) for t in ranked[:5]]
    )
    # The rules decide: without them the five best are others.
    assert sorted(all_hypotheses(7, cfg, 4), key=exhaustive_score, reverse=True)[:5] != ranked[:5]


@pytest.mark.parametrize("mode", ["greedy", "beam", "sampling"])
def test_no_mode_repeats_an_ngram_and_a_batch_searches_as_each_sentence_alone(mode):
    model = RecurrentFake(vocab_size=30, seed=5, sharpness=4.0)
    sources = random_sources(6, vocab_size=30, seed=1)
    cfg = DecodeConfig(
        beam_size=1 if mode == "greedy" else 4,
        n_best=1 if mode == "greedy" else 3,
        sampling=mode == "sampling",
        max_len_a=3.0,
        max_len_b=6,
        no_repeat_ngram_size=2,
        disable_unk=True,
    )
    batch = search(model, *padded(sources), cfg)
    hypotheses = [h.tokens for r in batch for h in r.hypotheses]
    assert not any(repeats(h, 2) or UNK in h for h in hypotheses)
    unruled = search(model, *padded(sources), dataclasses.replace(cfg, no_repeat_ngram_size=0))
    assert any(repeats(h.tokens, 2) for r in unruled for h in r.hypotheses)
    alone = [search(model, *padded([s]), cfg)[0] for s in sources]
    assert [[h.tokens for h in r.hypotheses] for r in alone] == [
        [h.tokens for h in r.hypotheses] for r in batch
    ]


def test_a_forced_prefix_is_exempt_and_counts_as_history():
    model = RecurrentFake(vocab_size=12, seed=2)
    sources = random_sources(3, vocab_size=12, seed=3)
    cfg = DecodeConfig(beam_size=3, max_len_a=0.0, max_len_b=9, no_repeat_ngram_size=1)
    prefixes = [[4, 4, 5], [6], [7, 7]]
    for search_mode in (beam_search, greedy_search):
        mode_cfg = cfg if search_mode is beam_search else dataclasses.replace(cfg, beam_size=1)
        for result, prefix in zip(
            search_mode(model, *padded(sources), mode_cfg, prefixes=prefixes), prefixes, strict=True
        ):
            tokens = result.best.tokens
            assert tokens[: len(prefix)] == prefix
            rest = tokens[len(prefix) :]
            assert not repeats(rest, 1) and not set(rest) & set(prefix)


@pytest.mark.parametrize("mode", ["greedy", "beam", "sampling"])
def test_a_vocabulary_too_small_for_the_rule_lifts_it_where_nothing_is_left(mode):
    """Five producible tokens and a limit of 12: once every token has been used, the rule
    would leave no token at all; the row goes on (repeating) instead of ending in nothing or
    failing, and before that point no token repeats."""
    model = RecurrentFake(vocab_size=8, seed=7, sharpness=0.5)
    cfg = DecodeConfig(
        beam_size=1 if mode == "greedy" else 3,
        sampling=mode == "sampling",
        max_len_a=0.0,
        max_len_b=12,
        min_len=12,  # EOS forbidden: the row must produce ordinary tokens
        no_repeat_ngram_size=1,
    )
    (result,) = search(model, *padded([[4, 5, 6]]), cfg)
    tokens = result.best.tokens
    assert len(tokens) == 12 and torch.isfinite(torch.tensor(result.best.score))
    assert len(set(tokens[:5])) == 5  # every producible token once before any repeats
    assert set(tokens) == {UNK, 4, 5, 6, 7}


def _holds(tokens: list[int], phrase: list[int]) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens)))


@pytest.mark.parametrize("n", [1, 2])
def test_a_constraint_that_repeats_an_ngram_is_still_met(n):
    """A phrase holding an n-gram twice ("bye bye", "a man and a man") is exempt from the rule
    while it is unmet, as a forced prefix is: every translation holds it. Without the exemption
    the phrase could never be completed, and the search returned a translation without it."""
    model = RecurrentFake(vocab_size=12, seed=2)
    sources = random_sources(3, vocab_size=12, seed=5)
    phrases = [[[4, 4]], [[5, 6, 5, 6, 7]], [[8, 9], [8, 9]]]
    cfg = DecodeConfig(beam_size=4, max_len_a=0.0, max_len_b=10, no_repeat_ngram_size=n)
    found = search(model, *padded(sources), cfg, constraints=phrases)
    for result, wanted in zip(found, phrases, strict=True):
        tokens = result.best.tokens
        assert all(_holds(tokens, phrase) for phrase in wanted), (tokens, wanted)
        assert torch.isfinite(torch.tensor(result.best.score))
