"""The serving engine against the offline Translator: the same translations, whatever the mix
of requests, arrival times and options; every KV block back in the pool afterwards."""

from __future__ import annotations

import dataclasses
import random
import threading

import pytest

from transformer_mt.inference.translator import Translator
from transformer_mt.serve.engine import Engine, ServeLimits

from tests.conftest import WORDS


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) for _ in range(n)]


@pytest.fixture
def engine(checkpoint):
    engine = Engine.from_checkpoint(
        str(checkpoint), limits=ServeLimits(kv_blocks=256, block_size=4)
    )
    engine.start()
    yield engine
    engine.stop()


@pytest.mark.parametrize("beam_size, n_best", [(1, 1), (5, 1), (5, 3)])
def test_concurrent_requests_translate_as_the_translator_does(
    checkpoint, engine, beam_size, n_best
):
    texts = sentences(40, seed=beam_size + n_best)
    decode = dataclasses.replace(engine.defaults, beam_size=beam_size, n_best=n_best)
    offline = Translator.from_checkpoint(str(checkpoint), beam_size=beam_size, n_best=n_best)
    expected = offline.translate(texts)
    jobs = [engine.submit([t], decode) for t in texts]
    got = [job.future.result(timeout=60)[0] for job in jobs]
    for want, have in zip(expected, got, strict=True):
        assert have.texts == want.texts
        assert have.scores == pytest.approx(want.scores, abs=1e-4)
    stats = engine.stats()
    assert stats.kv_blocks_used == 0 and stats.kv_blocks_reserved == 0


def test_mixed_options_and_prefixes_from_many_threads(checkpoint, engine):
    texts = sentences(24, seed=7)
    prefixes = [" ".join(t.split()[:2]) if i % 3 == 0 else "" for i, t in enumerate(texts)]
    options = [(1, 1), (5, 1), (3, 2), (5, 5)]
    results = {}

    def client(i: int) -> None:
        beam, n_best = options[i % len(options)]
        decode = dataclasses.replace(engine.defaults, beam_size=beam, n_best=n_best)
        job = engine.submit([texts[i]], decode, [prefixes[i]])
        results[i] = job.future.result(timeout=60)[0]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, text in enumerate(texts):
        beam, n_best = options[i % len(options)]
        offline = Translator.from_checkpoint(str(checkpoint), beam_size=beam, n_best=n_best)
        (want,) = offline.translate([text], prefixes=[prefixes[i]])
        assert results[i].texts == want.texts, (i, text)
    assert engine.stats().kv_blocks_used == 0
