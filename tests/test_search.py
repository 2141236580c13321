"""Search: greedy vs beam, exhaustive optimum, hand-computed scripts, batch invariance,
n-best, min_len, sampling, and the real model through the same protocol."""

import dataclasses
import inspect
import itertools
import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from transformer_mt.config import DecodeConfig, ModelConfig
from transformer_mt.errors import TmtError
from transformer_mt.search import beam as search_beam
from transformer_mt.search import (
    beam_search,
    greedy_search,
    length_penalty,
    max_output_lengths,
    sample,
    search,
    top_k,
)
from transformer_mt.search import sampling as search_sampling

from .search_fakes import EOS, PAD, RecurrentFake, ScriptedFake, sequence_log_prob

A, B = 4, 5  # two ordinary target tokens of the scripted model


def padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S) right-padded ids and their (B, 1, 1, S) keep-mask."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
    return ids, (ids != PAD)[:, None, None, :]


def random_sources(n: int, vocab_size: int = 10, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 8, (n,), generator=g).tolist()
    return [torch.randint(4, vocab_size, (k,), generator=g).tolist() for k in lengths]


def summary(results) -> list[list[tuple[list[int], float]]]:
    return [[(h.tokens, h.score) for h in r.hypotheses] for r in results]


def assert_same_results(got, expected) -> None:
    assert [[h.tokens for h in r.hypotheses] for r in got] == [
        [h.tokens for h in r.hypotheses] for r in expected
    ]
    got_scores = torch.tensor([h.score for r in got for h in r.hypotheses])
    expected_scores = torch.tensor([h.score for r in expected for h in r.hypotheses])
    assert_close(got_scores, expected_scores, rtol=1e-5, atol=1e-5)


# --- formulas -------------------------------------------------------------------------------


def test_default_special_ids_match_the_tokenizer():
    from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID

    defaults = inspect.signature(beam_search).parameters["options"].default.ids
    assert (defaults.pad, defaults.bos, defaults.eos) == (PAD_ID, BOS_ID, EOS_ID)


def test_length_penalty_formulas():
    assert length_penalty(4, DecodeConfig(length_norm="gnmt", length_penalty=0.6)) == (
        pytest.approx((9 / 6) ** 0.6)
    )
    assert length_penalty(4, DecodeConfig(length_norm="average")) == 4.0
    assert length_penalty(4, DecodeConfig(length_norm="none")) == 1.0


def test_max_output_lengths_formula():
    _, mask = padded([[5], [5, 6, 7], [5, 6, 7, 8]])
    cfg = DecodeConfig(max_len_a=0.5, max_len_b=1)
    # floor(0.5 * |x| + 1) for |x| = 1, 3, 4
    assert max_output_lengths(mask, cfg).tolist() == [1, 2, 3]
    assert max_output_lengths(mask, DecodeConfig(max_len_a=0.0, max_len_b=0)).tolist() == [1] * 3


# --- scripted model: expected values by hand ------------------------------------------------

# Step 1: A surely; step 2: EOS 0.52 or A; step 3: EOS 0.9 or A. So the two hypotheses are
#   short = A EOS    log P = log 0.52,        |y| = 2
#   long  = A A EOS  log P = log(0.48 * 0.9), |y| = 3
LENGTH_SCRIPT = [{A: 1.0}, {EOS: 0.52, A: 0.48}, {EOS: 0.9, A: 0.1}]
SHORT, LONG = math.log(0.52), math.log(0.48 * 0.9)


@pytest.mark.parametrize(
    "length_norm, alpha, short_lp, long_lp, winner",
    [
        ("none", 1.0, 1.0, 1.0, [A]),  # -0.654 vs -0.839
        ("average", 1.0, 2.0, 3.0, [A, A]),  # -0.327 vs -0.280
        ("gnmt", 1.0, 7 / 6, 8 / 6, [A]),  # -0.560 vs -0.630
        ("gnmt", 2.0, (7 / 6) ** 2, (8 / 6) ** 2, [A, A]),  # -0.480 vs -0.472
    ],
)
def test_length_penalty_decides_between_scripted_hypotheses(
    length_norm, alpha, short_lp, long_lp, winner
):
    cfg = DecodeConfig(beam_size=2, n_best=2, length_norm=length_norm, length_penalty=alpha)
    src_ids, src_mask = padded([[5, 6, 7]])
    (result,) = beam_search(ScriptedFake(LENGTH_SCRIPT), src_ids, src_mask, cfg)
    scores = {tuple(h.tokens): h.score for h in result.hypotheses}
    assert scores == pytest.approx({(A,): SHORT / short_lp, (A, A): LONG / long_lp})
    assert result.best.tokens == winner
    assert [h.length for h in result.hypotheses] == ([2, 3] if winner == [A] else [3, 2])


@pytest.mark.parametrize("beam_size", [1, 3])
def test_max_len_cuts_hypotheses_without_eos(beam_size):
    never_ends = ScriptedFake([{A: 0.7, B: 0.3}])
    src_ids, src_mask = padded([[5], [5, 6, 7], [5, 6, 7, 8]])
    cfg = DecodeConfig(beam_size=beam_size, n_best=beam_size, max_len_a=0.5, max_len_b=1)
    results = search(never_ends, src_ids, src_mask, cfg)
    for result, max_len in zip(results, [1, 2, 3], strict=True):  # floor(0.5 |x| + 1)
        assert result.best.tokens == [A] * max_len
        gnmt = ((5 + max_len) / 6) ** cfg.length_penalty
        assert result.best.score == pytest.approx(max_len * math.log(0.7) / gnmt)
        assert all(h.length == max_len and not h.has_eos for h in result.hypotheses)


@pytest.mark.parametrize("beam_size", [1, 2])
@pytest.mark.parametrize("min_len", [0, 1, 3])
def test_min_len_forbids_early_eos(beam_size, min_len):
    eager = ScriptedFake([{EOS: 0.6, A: 0.4}])
    src_ids, src_mask = padded([[5, 6]])
    cfg = DecodeConfig(beam_size=beam_size, n_best=beam_size, min_len=min_len, max_len_b=8)
    (result,) = search(eager, src_ids, src_mask, cfg)
    # EOS is the likelier token, so it comes as soon as it is allowed; its probability is
    # not renormalised while it is forbidden.
    assert result.best.tokens == [A] * min_len
    expected = (min_len * math.log(0.4) + math.log(0.6)) / ((5 + min_len + 1) / 6)
    assert result.best.score == pytest.approx(expected)
    assert all(len(h.tokens) >= min_len for h in result.hypotheses)


# --- recurrent model: properties ------------------------------------------------------------


def test_beam_size_one_equals_greedy():
    model = RecurrentFake(seed=2)
    src_ids, src_mask = padded(random_sources(6))
    cfg = DecodeConfig(beam_size=1, n_best=1, max_len_a=1.0, max_len_b=3)
    assert_same_results(
        beam_search(model, src_ids, src_mask, cfg), greedy_search(model, src_ids, src_mask, cfg)
    )


def all_hypotheses(vocab_size: int, cfg: DecodeConfig, max_len: int):
    """Every (tokens incl. final EOS if any) search may produce: PAD and BOS never, EOS only as
    the last token and not before min_len tokens, cut at max_len tokens."""
    emitted = [t for t in range(vocab_size) if t not in (PAD, 2, EOS)]
    for length in range(max_len + 1):
        for body in itertools.product(emitted, repeat=length):
            if length < max_len and length >= cfg.min_len:
                yield [*body, EOS]
            if length == max_len:
                yield list(body)


@pytest.mark.parametrize("length_norm", ["gnmt", "average", "none"])
@pytest.mark.parametrize("min_len", [0, 2])
def test_wide_beam_finds_the_exhaustive_optimum(length_norm, min_len):
    # A beam as wide as the vocabulary is not exhaustive once prefixes outnumber it (3 tokens
    # to continue with give 3**t prefixes), so the beam is as wide as the hypothesis space:
    # then nothing is pruned and search must return exactly the exhaustive ranking.
    model = RecurrentFake(vocab_size=6, seed=3, sharpness=2.0)
    src = [4, 5, 5]
    cfg = DecodeConfig(max_len_a=0.0, max_len_b=4, min_len=min_len, length_norm=length_norm)
    hypotheses = list(all_hypotheses(6, cfg, max_len=4))
    cfg = dataclasses.replace(cfg, beam_size=len(hypotheses), n_best=5)

    def exhaustive_score(tokens: list[int]) -> float:
        return sequence_log_prob(model, torch.tensor(src), tokens) / length_penalty(
            len(tokens), cfg
        )

    ranked = sorted(hypotheses, key=exhaustive_score, reverse=True)
    src_ids, src_mask = padded([src])
    (result,) = beam_search(model, src_ids, src_mask, cfg)
    best = ranked[0]
    assert result.best.tokens + [EOS] * result.best.has_eos == best
    assert result.best.score == pytest.approx(exhaustive_score(best))
    top = [exhaustive_score(t) for t in ranked[:5]]
    assert [h.score for h in result.hypotheses] == pytest.approx(top)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_batch_translates_like_each_sentence_alone(beam_size):
    model = RecurrentFake(seed=3)
    sources = random_sources(7, seed=2)
    cfg = DecodeConfig(beam_size=beam_size, n_best=beam_size, max_len_a=1.0, max_len_b=3)
    batch = search(model, *padded(sources), cfg)
    # The first step decodes one row per sentence (its beams are equal), then K rows each;
    # sentences left the batch at different steps: the row count shrank along the way.
    counts = model.row_counts
    assert counts[:2] == [7, 7 * beam_size] and len(set(counts[1:])) > 3
    # The rows' sources were laid out once per change of rows, not at every step.
    changes = sum(a != b for a, b in zip(counts, counts[1:], strict=False))
    assert model.layouts == 1 + changes < len(counts)
    alone = [search(model, *padded([s]), cfg)[0] for s in sources]
    assert_same_results(batch, alone)


def test_n_best_is_sorted_and_scored_like_its_definition():
    model = RecurrentFake(seed=2)
    sources = random_sources(4, seed=5)
    cfg = DecodeConfig(beam_size=5, n_best=4, max_len_a=1.0, max_len_b=3, length_penalty=0.6)
    results = beam_search(model, *padded(sources), cfg)
    for src, result in zip(sources, results, strict=True):
        scores = [h.score for h in result.hypotheses]
        assert len(scores) == 4 and scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in result.hypotheses}) == 4
        for h in result.hypotheses:
            log_prob = sequence_log_prob(model, torch.tensor(src), h.tokens + [EOS] * h.has_eos)
            assert h.log_prob == pytest.approx(log_prob)
            assert h.score == pytest.approx(log_prob / length_penalty(h.length, cfg))


def test_beam_search_beats_or_ties_greedy_on_its_best():
    model = RecurrentFake(seed=3)
    src_ids, src_mask = padded(random_sources(6, seed=6))
    cfg = DecodeConfig(beam_size=4, n_best=1, max_len_a=1.0, max_len_b=3)
    beam = beam_search(model, src_ids, src_mask, cfg)
    greedy = greedy_search(model, src_ids, src_mask, cfg)
    for b, g in zip(beam, greedy, strict=True):
        assert b.best.score >= g.best.score - 1e-9


def test_a_model_whose_scores_are_nan_is_one_error_not_an_empty_result():
    """No hypothesis can finish when every score is NaN; callers took the first of none."""

    class NanModel(RecurrentFake):
        def decode_step(self, *args, **kwargs):
            log_probs, cache = super().decode_step(*args, **kwargs)
            return torch.full_like(log_probs, float("nan")), cache

    src_ids, src_mask = padded(random_sources(3))
    cfg = DecodeConfig(beam_size=3, max_len_b=4)
    with pytest.raises(TmtError, match=r"^the model's scores are not numbers \(NaN\)"):
        beam_search(NanModel(seed=1), src_ids, src_mask, cfg)


# --- sampling -------------------------------------------------------------------------------


@pytest.mark.parametrize("filters", [dict(top_k=1), dict(top_p=1e-6)])
def test_sampling_with_one_candidate_equals_greedy(filters):
    model = RecurrentFake(seed=2)
    src_ids, src_mask = padded(random_sources(5))
    cfg = DecodeConfig(max_len_a=1.0, max_len_b=3, sampling=True, temperature=3.0, **filters)
    assert_same_results(
        sample(model, src_ids, src_mask, cfg), greedy_search(model, src_ids, src_mask, cfg)
    )


def test_a_top_p_below_float32s_least_keeps_the_most_probable_token():
    """1e-300 is 0 in float32, where every token's mass above it is >= 0: all would go."""
    cfg = DecodeConfig(sampling=True, top_p=1e-300)
    choose = search_sampling._sampler(cfg, np.array([5, 6], dtype=np.uint64))
    log_probs = torch.log_softmax(torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]]), -1)
    assert choose(log_probs, torch.tensor([0, 1]), torch.tensor([0, 0])).tolist() == [1, 0]


PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])


def _shares(cfg: DecodeConfig, n: int = 20_000) -> torch.Tensor:
    """How often each token of `PROBS` is drawn in `n` draws of one row under `cfg`."""
    choose = search_sampling._sampler(cfg, np.arange(n, dtype=np.uint64))
    tokens = choose(
        PROBS.log().expand(n, 4).clone(), torch.arange(n), torch.zeros(n, dtype=torch.long)
    )
    return torch.bincount(tokens, minlength=4).double() / n


@pytest.mark.parametrize(
    "filters, expected",
    [
        # top_k 3 of 4: never the fourth token, the others renormalised
        (dict(top_k=3), torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95),
        # temperature T: softmax(log p / T); the product log p * T had drawn 0.68/0.25/0.06
        (dict(temperature=2.0), torch.softmax(PROBS.log() / 2.0, -1)),
        # top_p 0.9 keeps the token whose mass crosses 0.9 (0.5 + 0.3 + 0.15); cutting one
        # token early had drawn 0.625/0.375
        (dict(top_p=0.9), torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95),
    ],
)
def test_a_draw_picks_each_token_as_often_as_its_probability(filters, expected):
    """The inverse of the distribution function at uniform draws: 20,000 draws of one row
    against the probabilities its filters leave, and never a token they take away."""
    counts = _shares(DecodeConfig(sampling=True, **filters))
    assert torch.allclose(counts, expected.double(), atol=0.015)
    assert (counts[expected == 0] == 0).all()


def test_uniforms_are_splitmix64s_outputs():
    """SplitMix64 seeded 0 (Steele et al.'s reference: its first output is 0xE220A8397B1DCDAF)."""
    drawn = search_sampling.uniforms(np.array([0], dtype=np.uint64), np.array([0]))
    assert drawn[0] == (0xE220A8397B1DCDAF >> 11) * 2.0**-53


def test_a_sentence_draws_the_same_samples_alone_or_in_any_batch():
    """Same input, same output: a sample is keyed by decode.seed, its sentence's own ids and
    its number, not by the batch (the batch's padded ids had seeded one generator for all its
    sentences: a sentence drew otherwise beside others, or in another order). Nor does the
    global generator's state (moved here by another draw) change anything."""
    model = RecurrentFake(seed=2, sharpness=1.0)
    sources = random_sources(5)
    cfg = DecodeConfig(beam_size=3, n_best=3, max_len_b=6, sampling=True, top_k=5, top_p=0.9)

    def draw(rows, cfg=cfg):
        torch.rand(17)  # whatever ran before
        return summary(search(model, *padded(rows), cfg))

    together = draw(sources)
    assert together == draw(sources)
    assert [draw([row])[0] for row in sources] == together
    assert draw(sources[::-1]) == together[::-1]
    assert draw(sources, dataclasses.replace(cfg, seed=1)) != together
    assert all(len({tuple(t) for t, _ in r}) > 1 for r in together)  # the samples differ
    assert all([s for _, s in r] == sorted((s for _, s in r), reverse=True) for r in together)


# --- the real model -------------------------------------------------------------------------


def tiny_model(vocab_size: int = 20, **changes):
    from transformer_mt.model import build_model

    base = dict(d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.0, max_positions=64)
    cfg = ModelConfig(**{**base, **changes})
    torch.manual_seed(0)
    model = build_model(cfg, vocab_size).eval()
    with torch.no_grad():
        # An untrained model almost never says EOS; make it likelier so hypotheses end at
        # different steps and pruning is exercised.
        model.output_projection.weight[EOS] *= 4.0
    return model


@pytest.mark.parametrize(
    "beam_size, changes",
    [
        (1, {}),
        (3, {}),
        # relative positions and latent attention: their terms follow the beams' reorders
        (3, dict(positions="shaw")),
        (3, dict(positions="t5")),
        (3, dict(positions="alibi")),
        (3, dict(attention="mla")),
        (3, dict(attention="mla", positions="rope", mla_rope_dim=4)),
    ],
)
def test_real_model_batch_equals_single_and_scores_match_forward(beam_size, changes):
    model = tiny_model(**changes)
    sources = random_sources(6, vocab_size=20, seed=8)
    cfg = DecodeConfig(beam_size=beam_size, n_best=beam_size, max_len_a=1.0, max_len_b=3)
    batch = search(model, *padded(sources), cfg)
    alone = [search(model, *padded([s]), cfg)[0] for s in sources]
    assert_same_results(batch, alone)
    if not changes:  # with these weights some hypotheses end early: pruning is exercised
        assert any(h.has_eos for r in batch for h in r.hypotheses)
    for src, result in zip(sources, batch, strict=True):
        for h in result.hypotheses:
            assert_scored_like_forward(model, src, h)


def assert_scored_like_forward(model, src: list[int], h) -> None:
    """The hypothesis' log P equals the teacher-forced full forward pass (no cache)."""
    target = h.tokens + [EOS] * h.has_eos
    with torch.no_grad():
        logits = model(torch.tensor([src]), torch.tensor([[2] + target[:-1]]))
    log_prob = logits.log_softmax(-1)[0, torch.arange(len(target)), target].sum()
    assert h.log_prob == pytest.approx(float(log_prob), abs=1e-4)


def test_real_model_beam_size_one_equals_greedy():
    model = tiny_model()
    src_ids, src_mask = padded(random_sources(6, vocab_size=20, seed=9))
    cfg = DecodeConfig(beam_size=1, n_best=1, max_len_a=1.0, max_len_b=3)
    assert_same_results(
        beam_search(model, src_ids, src_mask, cfg), greedy_search(model, src_ids, src_mask, cfg)
    )


# --- the chunked top-k of beam search --------------------------------------------------------


@pytest.mark.parametrize("n_columns", [40, 1000, 40_000, 40_003])
def test_top_k_equals_torch_topk(n_columns):
    g = torch.Generator().manual_seed(n_columns)
    values = torch.randn(7, n_columns, generator=g)
    values[0] = float("-inf")  # a sentence whose live beams are all gone
    values[1, n_columns // 2 :] = float("-inf")  # dead beams beside a live one
    values[2, -3:] = 1e3 + torch.arange(3.0)  # the best entries after the last whole chunk
    for k in (1, 10):
        best, columns = top_k(values, k, chunk=64)
        expected = values.topk(k, dim=1).values
        assert torch.equal(best, expected)
        assert torch.equal(values.gather(1, columns), best)
        finite = best.isfinite()
        assert torch.equal(columns[finite], values.topk(k, dim=1).indices[finite])


def test_beam_search_through_chunked_top_k_equals_plain_topk(monkeypatch):
    """The slow twin: beam search whose candidate ranking is torch.topk itself."""
    model = tiny_model(vocab_size=2000)  # 3 beams x 2000 tokens: many chunks per sentence
    src_ids, src_mask = padded(random_sources(6, vocab_size=2000, seed=3))
    cfg = DecodeConfig(beam_size=3, n_best=3, max_len_a=1.0, max_len_b=4)
    fast = beam_search(model, src_ids, src_mask, cfg)
    monkeypatch.setattr(search_beam, "top_k", lambda values, k: values.topk(k, dim=1))
    assert_same_results(fast, beam_search(model, src_ids, src_mask, cfg))


def test_greedy_search_through_chunked_top_k_equals_argmax(monkeypatch):
    """The slow twin of greedy search: each row's best token by torch's argmax."""
    model = tiny_model(vocab_size=2000)
    src_ids, src_mask = padded(random_sources(6, vocab_size=2000, seed=4))
    cfg = DecodeConfig(beam_size=1, n_best=1, max_len_a=1.0, max_len_b=4)
    fast = greedy_search(model, src_ids, src_mask, cfg)
    monkeypatch.setattr(search_sampling, "_argmax", lambda log_probs, *_: log_probs.argmax(dim=-1))
    assert_same_results(fast, greedy_search(model, src_ids, src_mask, cfg))


# --- where new beams sit ----------------------------------------------------------------------


def test_parent_slots_keep_each_parents_best_child_in_its_slot():
    parents = torch.tensor([[0, 0, 1, 3, 0], [2, 2, 2, 2, 2], [4, 3, 2, 1, 0], [1, 0, 1, 1, 4]])
    slots = search_beam._parent_slots(parents)
    assert slots.tolist() == [[0, 2, 1, 3, 4], [2, 0, 1, 3, 4], [4, 3, 2, 1, 0], [1, 0, 2, 3, 4]]
    g = torch.Generator().manual_seed(0)
    parents = torch.randint(0, 6, (200, 6), generator=g)
    slots = search_beam._parent_slots(parents)
    assert torch.equal(slots.sort(dim=1).values, torch.arange(6).expand(200, 6))  # permutations
    for row, slot in zip(parents.tolist(), slots.tolist(), strict=True):
        for parent in set(row):
            assert slot[row.index(parent)] == parent  # the best child of each parent


def test_beam_search_with_beams_in_parent_slots_equals_best_first_order(monkeypatch):
    """The slow twin: new beams in best-first order, every cache row copied at each step."""
    model = tiny_model()
    src_ids, src_mask = padded(random_sources(6, vocab_size=20, seed=5))
    cfg = DecodeConfig(beam_size=4, n_best=4, max_len_a=1.0, max_len_b=4)
    fast = beam_search(model, src_ids, src_mask, cfg)
    monkeypatch.setattr(
        search_beam, "_parent_slots", lambda p: torch.arange(p.shape[1]).expand_as(p)
    )
    assert_same_results(fast, beam_search(model, src_ids, src_mask, cfg))


# --- forced target prefixes ------------------------------------------------------------------


@pytest.mark.parametrize("beam_size", [1, 3])
def test_forced_prefix_starts_every_hypothesis_and_is_scored(beam_size):
    model = tiny_model()
    sources = random_sources(5, vocab_size=20, seed=4)
    prefixes = [[7, 8, 9], [], [5], [11, 12, 13, 14, 15, 16, 17, 18], [6, 6]]
    # max_len floor(0 * |x| + 2) = 2 is below the 8-token prefix: raised to hold it.
    cfg = DecodeConfig(beam_size=beam_size, n_best=beam_size, max_len_a=0.0, max_len_b=2)
    batch = search(model, *padded(sources), cfg, prefixes=prefixes)
    alone = [
        search(model, *padded([s]), cfg, prefixes=[p])[0]
        for s, p in zip(sources, prefixes, strict=True)
    ]
    assert_same_results(batch, alone)
    for src, prefix, result in zip(sources, prefixes, batch, strict=True):
        for h in result.hypotheses:
            assert h.tokens[: len(prefix)] == prefix
            assert len(h.tokens) + h.has_eos <= max(2, len(prefix) + 1)
            assert_scored_like_forward(model, src, h)


def test_empty_prefixes_change_nothing():
    model = tiny_model()
    src_ids, src_mask = padded(random_sources(4, vocab_size=20, seed=5))
    cfg = DecodeConfig(beam_size=3, n_best=2, max_len_a=1.0, max_len_b=3)
    assert_same_results(
        search(model, src_ids, src_mask, cfg, prefixes=[[]] * 4),
        search(model, src_ids, src_mask, cfg),
    )


def test_a_prefix_count_other_than_one_per_sentence_is_refused():
    """Counted per text by the request type (tests/inference/test_requests.py); a search
    given other than one prefix per row refuses it all the same."""
    src_ids, src_mask = padded(random_sources(2, vocab_size=20, seed=5))
    for prefixes in ([[7]], [[7], [], [8]]):
        with pytest.raises(ValueError, match="zip"):
            search(tiny_model(), src_ids, src_mask, DecodeConfig(beam_size=2), prefixes=prefixes)
