"""DecodeConfig: search settings for validation BLEU and `tmt translate`, the bounds of its
numbers, and the fields that cannot change a translation."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from transformer_mt.config.checks import check_positive
from transformer_mt.config.errors import ConfigError

# Bounds of decode numbers that would otherwise overflow: a length penalty of 1e308 divides by
# infinity, a max_len_b of 1e19 wraps a 64-bit length to 1 token. Output lengths past these
# exceed every position table (the decoder stops there anyway), and |alpha| > 10 weighs a
# length difference of one token more than any log-probability.
DECODE_RANGES: dict[str, tuple[float, float]] = {
    "length_penalty": (-10.0, 10.0),
    "max_len_a": (0.0, 1000.0),
    "max_len_b": (0, 1_000_000),
    "min_len": (0, 1_000_000),
    "no_repeat_ngram_size": (0, 1_000_000),
    "temperature": (0.01, 100.0),
}

# A beam of 10**30 overflows the search's 64-bit row counts; 65,536 hypotheses a sentence are
# already past any memory.
MAX_BEAM = 65_536

# The changes that make any settings one greedy search with the same length limits: the cheap,
# deterministic hypothesis of validation BLEU and of attention maps.
GREEDY = {"beam_size": 1, "n_best": 1, "sampling": False}
# The settings only sampling reads: given to a search, they would change nothing.
SAMPLING_FIELDS = ("top_k", "top_p", "temperature", "seed")
# The settings only a search reads: sampling draws n_best samples, one token at a time.
SEARCH_FIELDS = ("beam_size", "early_stopping")


@dataclass(frozen=True)
class DecodeConfig:
    """Search settings for validation BLEU and `tmt translate`.

    Length penalty: score = log P(y|x) / lp(y), with lp(y) = ((5 + |y|) / 6) ** length_penalty
    under `length_norm: gnmt` (Wu et al. 2016), lp(y) = |y| under `average` (whatever
    length_penalty says), |y| ** length_penalty under `power` (transformers' `length_penalty`,
    which an imported model's checkpoint holds), 1 under `none`. Output length is at most
    max_len_a * |x| + max_len_b.

    When a beam search (K = beam_size > 1) ends a sentence, `early_stopping`: `k_finished`
    once K hypotheses have finished (fairseq; transformers' `early_stopping=True`);
    `heuristic` once, besides, the best live hypothesis scored at its current length (log P /
    lp(its tokens so far)) is no better than the K-th best finished one (transformers'
    `early_stopping=False`, its default and OPUS-MT's); `never` the same, with the live
    hypothesis scored at max_len(x) instead when lp(max_len(x)) is larger, as it could still
    grow that long (transformers' `early_stopping="never"`). Every rule ends a sentence at
    max_len(x); a beam of one stops at its first finished hypothesis, as greedy search does.
    """

    beam_size: int = 5  # 1: greedy
    length_penalty: float = 1.0  # the exponent of lp under gnmt and power
    length_norm: Literal["gnmt", "average", "none", "power"] = "gnmt"
    # k_finished: fairseq's rule, and the cheapest: it stops first.
    early_stopping: Literal["k_finished", "heuristic", "never"] = "k_finished"
    max_len_a: float = 1.5
    max_len_b: int = 10
    min_len: int = 1  # tokens before end-of-sentence may be chosen
    # A hypothesis never holds the same n tokens twice: the token that would repeat an n-gram
    # is forbidden (fairseq's, transformers' and CTranslate2's no_repeat_ngram_size), which
    # stops the loops ("a man a man a man") a model can fall into on text unlike its
    # training data. 0: off. A forced prefix is exempt but counts as what came before; so is
    # a constraint's token while the constraint is unmet (a term may repeat itself: bye bye).
    no_repeat_ngram_size: int = 0
    # The unknown piece (shown as ⁇, for characters the vocabulary lacks) is never produced
    # (CTranslate2's disable_unk); the search takes the best known piece instead.
    disable_unk: bool = False
    # An unknown piece that is produced is replaced by the source's unknown piece it attends
    # to most (any source piece where there is none: OpenNMT's and fairseq's replace_unk,
    # CTranslate2's replace_unknowns): numbers, names and characters the target vocabulary
    # lacks are copied from the source, not lost (inference/unknowns.py).
    replace_unk: bool = False
    n_best: int = 1
    max_tokens: int = 4096  # source tokens per translation batch
    sampling: bool = False  # sample instead of searching (top_k / top_p / temperature)
    top_k: int = 0  # 0: no top-k filter
    top_p: float = 1.0
    temperature: float = 1.0
    # Sampling's draws: those of a batch are a function of this and of the batch's sources
    # alone, so the same input and flags give the same samples (another seed, others).
    seed: int = 0

    def validate(self) -> None:
        for name in ("length_penalty", "max_len_a", "top_p", "temperature"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(
                    f"decode.{name}={getattr(self, name)} must be a finite number",
                    keys=(f"decode.{name}",),
                )
        for name, (low, high) in DECODE_RANGES.items():
            if not low <= getattr(self, name) <= high:
                raise ConfigError(
                    f"decode.{name}={_number(getattr(self, name))} must be in "
                    f"[{_number(low)}, {_number(high)}]",
                    keys=(f"decode.{name}",),
                )
        check_positive(self, "decode", ["beam_size", "n_best", "max_tokens", "temperature"])
        if self.beam_size > MAX_BEAM:
            raise ConfigError(
                f"decode.beam_size={self.beam_size} must be at most {MAX_BEAM}",
                keys=("decode.beam_size",),
            )
        if self.n_best > self.beam_size and not self.sampling:  # sampling reads no beam
            raise ConfigError(
                f"decode.n_best={self.n_best} must be <= decode.beam_size={self.beam_size}",
                keys=("decode.n_best", "decode.beam_size"),
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(
                f"decode.top_p={self.top_p} must be in (0, 1]", keys=("decode.top_p",)
            )
        if self.top_k < 0:
            raise ConfigError(f"decode.top_k={self.top_k} must be >= 0", keys=("decode.top_k",))
        if not 0 <= self.seed < 2**63:
            raise ConfigError(
                f"decode.seed={self.seed} must be in [0, 2**63)", keys=("decode.seed",)
            )

    def output_settings(self) -> tuple:
        """The value of every field that can change a translation, in field order (all but
        `OUTPUT_NEUTRAL_FIELDS`): settings with equal tuples translate alike. The server's
        translation cache and its search lanes key on this, so that a field added here
        tells requests apart without anyone listing it again."""
        return tuple(
            getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in OUTPUT_NEUTRAL_FIELDS
        )


# DecodeConfig fields that do not change a translation: `max_tokens` only sizes the offline
# translator's batches, and a batch translates as each of its sentences alone (tests of
# search and of the Translator). Not to the last bit: attention's sums over a batch's padded
# source length round otherwise than over the sentence's own, so a score can differ in its
# last printed digit (`--nbest 3` of 300 test2016 lines, `--max-tokens` 20 against 100,000:
# 3 of 900 scores, -9.1716 for -9.1717, the texts all equal). Every other field is an output
# setting, a field added to DecodeConfig included, unless it is named here.
OUTPUT_NEUTRAL_FIELDS = frozenset({"max_tokens"})


def _number(value: float) -> str:
    """A bound or a value as a message shows it: an int in full, a float as `:g` does."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def check_changes_read(decode: DecodeConfig, given: DecodeConfig) -> None:
    """Refuse a change from `given` to `decode` that `decode` leaves unread: it would change
    nothing, where the user meant it to (a beam for sampling, a sampling setting for a search,
    a length penalty that the length norm does not raise to, a replacement of unknown pieces
    that are never produced).

    Raises:
        ConfigError: naming the changed setting, and the one that leaves it unread.
    """
    changed = [f.name for f in dataclasses.fields(decode)]
    changed = [n for n in changed if getattr(decode, n) != getattr(given, n)]
    if decode.beam_size == 1:  # one hypothesis a row, as sampling keeps: said, not unread
        changed = [n for n in changed if n != "beam_size"]
    unread = (
        (
            SAMPLING_FIELDS,
            not decode.sampling,
            "the search does not sample (sampling false); sample",
        ),
        (SEARCH_FIELDS, decode.sampling, "the translation is sampled (sampling true); search"),
        (
            ("length_penalty",),
            decode.length_norm in ("average", "none"),
            f"length_norm {decode.length_norm} raises nothing to it (gnmt and power do); use one "
            "of them",
        ),
        (
            ("replace_unk",),
            decode.disable_unk,
            "no unknown piece is produced (disable_unk true); allow it",
        ),
    )
    for names, unused, why in unread:
        found = [n for n in changed if n in names] if unused else []
        if found:
            key, value = f"decode.{found[0]}", getattr(decode, found[0])
            shown = value if isinstance(value, str | bool) else _number(value)
            raise ConfigError(
                f"{key}={shown} changes nothing where {why}, or leave it out", keys=(key,)
            )
