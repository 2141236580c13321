"""The engine's beams stop by the decode settings' rule (`DecodeConfig.early_stopping`, as an
imported model's checkpoint holds it), with sentences joining a batch under way, as
`Translator` stops them."""

from __future__ import annotations

import dataclasses
import random
import time

import pytest

from tests.conftest import WORDS, fit_tiny_checkpoint
from transformer_mt.inference.translator import Translator
from transformer_mt.serve.engine import Engine, ServeLimits


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) for _ in range(n)]


@pytest.fixture(scope="module")
def trained(checkpoint, tmp_path_factory):
    """The tiny model after a few steps of reversing short sentences: hypotheses end in EOS at
    many lengths, so that when a beam stops changes what it finds (an untrained model never
    ends one before max_len)."""
    tokenizer = Translator.from_checkpoint(str(checkpoint)).src_tokenizer
    texts = [" ".join(WORDS[i : i + 2 + i % 3]) for i in range(len(WORDS))]
    pairs = [(tokenizer.encode(t), tokenizer.encode(" ".join(t.split()[::-1]))) for t in texts]
    out = tmp_path_factory.mktemp("stopping") / "model.pt"
    return fit_tiny_checkpoint(checkpoint, pairs, 3e-2, 60, out)


@pytest.mark.parametrize("rule", ["heuristic", "never"])
def test_the_engine_stops_beams_as_the_translator_does(trained, rule):
    changes = dict(
        beam_size=4, n_best=2, length_norm="power", length_penalty=0.6, early_stopping=rule
    )
    texts = sentences(30, seed=5)
    engine = Engine.from_checkpoint(str(trained), limits=ServeLimits(kv_blocks=512))
    engine.start()
    decode = dataclasses.replace(engine.defaults, **changes)
    jobs = []
    for text in texts:  # each joins a batch under way: rows at many steps side by side
        jobs.append(engine.submit([text], decode))
        time.sleep(0.002)
    got = [job.future.result(timeout=60)[0] for job in jobs]
    engine.stop()
    expected = Translator.from_checkpoint(str(trained), **changes).translate(texts)
    for have, want in zip(got, expected, strict=True):
        assert have.texts == want.texts
        assert have.scores == pytest.approx(want.scores, abs=1e-4)
    first_k = {**changes, "early_stopping": "k_finished"}
    other = Translator.from_checkpoint(str(trained), **first_k).translate(texts)
    assert [t.texts for t in other] != [t.texts for t in expected]  # the rule mattered
