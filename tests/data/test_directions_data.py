"""Training data in several directions: each pair carries its direction's number, streamed and
in-memory reads agree, temperature sampling sets the mix, and a batch frames each pair with
its own direction's language tags."""

import warnings
from collections import Counter

import numpy as np
import pytest

from transformer_mt.config import DataConfig, TrainSource
from transformer_mt.data.batching import collate
from transformer_mt.data.dataset import load_split, stream_pairs
from transformer_mt.data.encoding import EncodedCorpus
from transformer_mt.data.mixing import checked_proportions, mixing_weights
from transformer_mt.data.specials import Framing, SpecialTokens
from transformer_mt.data.token_column import TokenColumn

SIZES = {"de": 40, "fr": 10, "cs": 5}


@pytest.fixture
def directed(tmp_path):
    """X->en for X in de, fr, cs (sizes SIZES), and en->de, as text files of one prefix each."""
    sources = []
    for lang, n in SIZES.items():
        prefix = tmp_path / f"{lang}en"
        (tmp_path / f"{lang}en.{lang}").write_text("".join(f"{lang} {i}\n" for i in range(n)))
        (tmp_path / f"{lang}en.en").write_text("".join(f"en {lang} {i}\n" for i in range(n)))
        sources.append(TrainSource(str(prefix), src_lang=lang, tgt_lang="en"))
    sources.append(TrainSource(str(tmp_path / "deen"), src_lang="en", tgt_lang="de"))
    return DataConfig(src_lang="de", tgt_lang="en", train=tuple(sources))


def test_directions_are_numbered_with_the_valid_direction_first(directed):
    assert directed.directions() == (("de", "en"), ("fr", "en"), ("cs", "en"), ("en", "de"))


@pytest.mark.parametrize("temperature", [None, 1.0, 5.0])
def test_each_pair_carries_its_direction_streamed_and_in_memory(directed, temperature):
    cfg = DataConfig(**{**directed.__dict__, "temperature": temperature})
    streamed = list(stream_pairs(cfg, "train"))
    corpus = load_split(cfg, "train")
    assert list(zip(corpus["src"], corpus["tgt"], corpus["direction"], strict=True)) == streamed
    for src, tgt, direction in streamed:
        src_lang, tgt_lang = cfg.directions()[direction]
        assert src.split()[0] == src_lang and tgt.split()[0] == tgt_lang
        if direction == 3:  # en -> de reads the de-en files the other way round
            assert src.startswith("en de") and tgt.startswith("de ")


def test_temperature_one_draws_by_size_and_a_high_one_flattens_the_mix():
    sources = [TrainSource("a"), TrainSource("b", weight=2.0)]
    assert mixing_weights(sources, None, None) == [1.0, 2.0]
    by_size = mixing_weights(sources, [300, 50], 1.0)
    assert by_size == pytest.approx([300 / 400, 100 / 400])
    flat = np.asarray(mixing_weights(sources, [300, 50], 100.0))
    assert flat[0] / flat[1] == pytest.approx(3.0 ** (1 / 100))
    tempered = np.asarray([(1 / 3) ** 0.2, (2 / 3) ** 0.2])  # large sizes do not overflow
    assert mixing_weights(sources, [10**12, 10**12], 5.0) == pytest.approx(
        tempered / tempered.sum()
    )
    # Weights whose sum overflows: an equal mix is still an equal mix (every share read as 0)
    huge = [TrainSource("a", weight=1e308), TrainSource("b", weight=1e308)]
    assert mixing_weights(huge, None, None) == [1.0, 1.0]


def test_tempered_weights_whose_product_with_the_sizes_overflows_keep_their_proportions():
    """weight * size of 1e308 * 300 is inf: taken as a sum of logarithms it is not, and the
    mix is (1e308 * 300) ** (1 / T) to (1e308 * 100) ** (1 / T), without a RuntimeWarning."""
    huge = [TrainSource("a", weight=1e308), TrainSource("b", weight=1e308)]
    keys = ["data.train[0]", "data.train[1]"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shares = checked_proportions(keys, huge, [300, 100], 5.0, in_memory=True)
    tempered = np.asarray([3.0 ** (1 / 5), 1.0])
    assert shares == pytest.approx(tempered / tempered.sum())


def test_a_mix_at_temperature_one_follows_the_sizes(directed):
    shares = {}
    for temperature in (None, 1.0):
        cfg = DataConfig(**{**directed.__dict__, "temperature": temperature})
        counts = Counter(direction for *_, direction in stream_pairs(cfg, "train"))
        shares[temperature] = (counts[0] + counts[3]) / sum(counts.values())
    # Equal weights draw each source a quarter of the time; by size the two of 40 pairs
    # take 80 of 95 draws.
    assert shares[None] < 0.6 < 0.75 < shares[1.0]


def test_a_batch_frames_each_pair_with_its_directions_tags():
    specials = SpecialTokens(
        never=(0, 2, 4, 5, 6), language_tags={"en": 4, "de": 5, "fr": 6}, source_tag="target"
    )
    framing = Framing.of(specials, [("de", "en"), ("en", "de"), ("en", "fr")])
    corpus = EncodedCorpus(
        TokenColumn.from_lists([[10, 11], [12], [13, 14, 15]]),
        TokenColumn.from_lists([[20], [21, 22], [23]]),
        np.array([2, 0, 1]),
    )
    batch = collate(corpus, np.array([0, 1, 2]), framing)
    assert batch.src_ids.tolist() == [[6, 10, 11, 3, 0], [4, 12, 3, 0, 0], [5, 13, 14, 15, 3]]
    assert batch.tgt_in_ids.tolist() == [[2, 20, 0], [2, 21, 22], [2, 23, 0]]
    assert batch.n_tgt_tokens == 4 + 3
