"""When beam search ends a sentence (`DecodeConfig.early_stopping`) and the `power` length
normalisation: the batched search against a one-sentence-at-a-time twin written from the rules
(search/__init__, transformers' `_beam_search`), and a script whose steps are worked out by
hand."""

import math

import pytest
import torch

from transformer_mt.config import DecodeConfig
from transformer_mt.search import beam_search, length_penalty, search

from .search_fakes import BOS, EOS, PAD, RecurrentFake, ScriptedFake
from .test_search import A, assert_same_results, padded, random_sources

RULES = ("k_finished", "heuristic", "never")
# (length_norm, length_penalty): transformers' |y| ** p with p rewarding length, p = 1 (our
# average), p < 0 (then `never` scores a live beam at its current length), and GNMT.
NORMS = [("power", 0.6), ("average", 1.0), ("power", -0.5), ("gnmt", 1.0), ("none", 0.0)]
# Two fake models (seed, sharpness) on whose sentences the rules search differently: the first
# under `average` for each pair of rules (`test_the_rules_search_differently`), the second
# k_finished and heuristic under every normalisation but `none`.
MODELS = [(0, 3.0), (7, 3.0)]


class PrefixLogProbs:
    """The model's next-token log-probs after any prefix of one source, each prefix decoded
    once from its parent's cache."""

    def __init__(self, model, src: list[int]):
        self.model = model
        self.src_ids, self.src_mask = padded([src])
        self.memory = model.encode(self.src_ids, self.src_mask)
        self.known: dict[tuple[int, ...], tuple[torch.Tensor, object]] = {}

    def __call__(self, tokens: tuple[int, ...]) -> torch.Tensor:
        if tokens not in self.known:
            cache = None
            if tokens:
                self(tokens[:-1])
                cache = self.known[tokens[:-1]][1]
            last = torch.tensor([tokens[-1] if tokens else BOS])
            sources = torch.zeros(1, dtype=torch.long)
            log_probs, cache = self.model.decode_step(
                last, self.memory, self.src_mask, sources, cache
            )
            self.known[tokens] = (log_probs[0], cache)
        return self.known[tokens][0]


def twin_beam_search(model, src: list[int], cfg: DecodeConfig, max_len: int):
    """One sentence, lists and loops: each step expands every live hypothesis by every allowed
    token, ranks the expansions, finishes those among the first K that end in EOS (or reach
    max_len), keeps the first K others alive, and stops by `cfg.early_stopping`. Returns the
    n-best list as (tokens with EOS, score)."""
    k, next_log_probs = cfg.beam_size, PrefixLogProbs(model, src)
    live, finished = [((), 0.0)], []
    for step in range(1, max_len + 1):
        expansions = []
        for tokens, log_p in live:
            for token, lp in enumerate(next_log_probs(tokens).tolist()):
                if token in (PAD, BOS) or (token == EOS and len(tokens) < cfg.min_len):
                    continue
                expansions.append((log_p + lp, (*tokens, token)))
        expansions = sorted(expansions, key=lambda e: -e[0])[: 2 * k]
        for log_p, tokens in expansions[:k]:
            if tokens[-1] == EOS or step == max_len:
                finished.append((tokens, log_p / length_penalty(step, cfg)))
        live = [(t, log_p) for log_p, t in expansions if t[-1] != EOS][:k]
        if step == max_len or stops(cfg, finished, live, step, max_len):
            break
    return sorted(finished, key=lambda f: -f[1])[: cfg.n_best]


def stops(cfg, finished, live, step, max_len) -> bool:
    """The rule of `cfg.early_stopping`, as transformers' `_check_early_stop_heuristic` says it
    (`never`: max_len when the length penalty rewards length, else the current length)."""
    if len(finished) < cfg.beam_size:
        return False
    if cfg.early_stopping == "k_finished" or cfg.beam_size == 1:
        return True
    worst = sorted((score for _, score in finished), reverse=True)[cfg.beam_size - 1]
    grows = length_penalty(max_len, cfg) > length_penalty(step, cfg)
    length = max_len if cfg.early_stopping == "never" and grows else step
    return max(log_p for _, log_p in live) / length_penalty(length, cfg) <= worst


def as_pairs(result):
    return [((*h.tokens, *[EOS] * h.has_eos), h.score) for h in result.hypotheses]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("norm, penalty", NORMS)
@pytest.mark.parametrize("seed, sharpness", MODELS)
def test_batched_beam_search_equals_its_twin(seed, sharpness, rule, norm, penalty):
    model = RecurrentFake(seed=seed, sharpness=sharpness)
    sources = random_sources(8, seed=3)
    cfg = DecodeConfig(
        beam_size=3, n_best=3, max_len_a=0.0, max_len_b=7, min_len=1, length_norm=norm,
        length_penalty=penalty, early_stopping=rule,
    )  # fmt: skip
    for src, result in zip(sources, beam_search(model, *padded(sources), cfg), strict=True):
        want = twin_beam_search(model, src, cfg, max_len=7)
        got = as_pairs(result)
        assert [tokens for tokens, _ in got] == [tokens for tokens, _ in want]
        assert [score for _, score in got] == pytest.approx([score for _, score in want])


def test_the_rules_search_differently_on_the_twins_sentences():
    """Each rule searches at least as long as the one before it, on the same beams, so its
    best can only be better; here each finds other n-best lists on some sentences: the twin
    comparison above tries rules that matter."""
    model = RecurrentFake(seed=MODELS[0][0], sharpness=MODELS[0][1])
    sources = random_sources(8, seed=3)
    found = {}
    for rule in RULES:
        cfg = DecodeConfig(
            beam_size=3, n_best=3, max_len_a=0.0, max_len_b=7, length_norm="average",
            early_stopping=rule,
        )  # fmt: skip
        found[rule] = [as_pairs(r) for r in beam_search(model, *padded(sources), cfg)]
    for weaker, stronger in [("k_finished", "heuristic"), ("heuristic", "never")]:
        pairs = list(zip(found[weaker], found[stronger], strict=True))
        assert all(s[0][1] >= w[0][1] for w, s in pairs)
        assert any(s != w for w, s in pairs), (weaker, stronger)


@pytest.mark.parametrize("rule", RULES)
def test_a_batch_translates_like_each_sentence_alone(rule):
    model = RecurrentFake(seed=3)
    sources = random_sources(7, seed=2)
    cfg = DecodeConfig(
        beam_size=3, n_best=3, max_len_a=1.0, max_len_b=3, length_norm="power",
        length_penalty=0.6, early_stopping=rule,
    )  # fmt: skip
    batch = search(model, *padded(sources), cfg)
    assert_same_results(batch, [search(model, *padded([s]), cfg)[0] for s in sources])


class CountingFake(ScriptedFake):
    """`ScriptedFake` that counts its decoding steps."""

    steps = 0

    def decode_step(self, tgt_ids, memory, src_mask, sources, cache):
        self.steps += 1
        return super().decode_step(tgt_ids, memory, src_mask, sources, cache)


# Beam 2, lp(n) = n (average), max_len 20; the same distribution for every row of a step:
#   step 1  EOS 0.1, A 0.9:  EOS finishes (log 0.1 / 1 = -2.303); A lives on.
#   step 2  EOS 0.55, A 0.45: A EOS finishes (log 0.495 / 2 = -0.352): two have finished,
#           so k_finished stops with A EOS best. A A lives, log 0.405 / 2 = -0.452 above the
#           second best finished (-2.303): heuristic searches on.
#   step 3  EOS 0.99, A 0.01 (and after): A A EOS finishes (log 0.40095 / 3 = -0.305), the
#           best; A A A lives, log 0.00405 / 3 = -1.836 below the second best (-0.352):
#           heuristic stops. Scored at max_len, log 0.00405 / 20 = -0.275 is above it:
#           never searches on.
#   step 4  A A A EOS finishes (-1.38); A A A A lives, log 4.05e-5 / 20 = -0.506: never stops.
STOPPING_SCRIPT = [{EOS: 0.1, A: 0.9}, {EOS: 0.55, A: 0.45}, {EOS: 0.99, A: 0.01}]


@pytest.mark.parametrize(
    "rule, steps, best, score",
    [
        ("k_finished", 2, [A], math.log(0.495) / 2),
        ("heuristic", 3, [A, A], math.log(0.405 * 0.99) / 3),
        ("never", 4, [A, A], math.log(0.405 * 0.99) / 3),
    ],
)
def test_each_rule_stops_where_the_hand_computed_scores_say(rule, steps, best, score):
    model = CountingFake(STOPPING_SCRIPT)
    cfg = DecodeConfig(
        beam_size=2, n_best=2, max_len_a=0.0, max_len_b=20, min_len=0, length_norm="average",
        early_stopping=rule,
    )  # fmt: skip
    (result,) = beam_search(model, *padded([[5, 6]]), cfg)
    assert model.steps == steps
    assert result.best.tokens == best
    assert result.best.score == pytest.approx(score)


def test_a_beam_of_one_stops_at_its_first_hypothesis_whatever_the_rule():
    """As greedy search, which `search` runs for a beam of one (and `generate` for one beam)."""
    model = RecurrentFake(seed=2)
    sources = random_sources(6)
    for rule in RULES:
        cfg = DecodeConfig(beam_size=1, max_len_a=1.0, max_len_b=3, early_stopping=rule)
        greedy = search(model, *padded(sources), cfg)
        assert_same_results(beam_search(model, *padded(sources), cfg), greedy)


def test_power_is_length_to_the_penalty_and_equals_average_and_none_at_one_and_zero():
    for n in (1, 4, 17):
        power = DecodeConfig(length_norm="power", length_penalty=0.6)
        assert length_penalty(n, power) == n**0.6
        as_tensor = length_penalty(torch.tensor([n]), power)
        assert as_tensor.dtype == torch.float64 and float(as_tensor) == pytest.approx(n**0.6)
        for p, other in [(1.0, "average"), (0.0, "none")]:
            same = DecodeConfig(length_norm=other, length_penalty=0.6)
            assert length_penalty(n, DecodeConfig(length_norm="power", length_penalty=p)) == (
                length_penalty(n, same)
            )
