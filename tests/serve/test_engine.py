"""The serving engine against the offline Translator: the same translations, whatever the mix
of requests, arrival times and options; every KV block back in the pool afterwards."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
import typing

import pytest

from tests.conftest import WORDS, save_tiny_checkpoint
from transformer_mt.config import ConfigError
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.inference.languages import Direction
from transformer_mt.inference.requests import Texts, TextsCountError
from transformer_mt.inference.translator import Translator
from transformer_mt.serve.contract import QueueFull, RequestTooLarge
from transformer_mt.serve.engine import Engine, ServeLimits

NO_TAGS = Direction(None, None)  # the direction of a model without language tags


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


def test_text_without_a_letter_is_served_as_written_as_the_translator_keeps_it(checkpoint, engine):
    """A served text's lines of numbers and symbols stay as written, between the
    translations of its other lines (a table pasted into a LibreTranslate client)."""
    offline = Translator.from_checkpoint(str(checkpoint), beam_size=engine.defaults.beam_size)
    lines = ["2024", "ein mann fährt rad", "12:30 🐕", "das buch"]
    expected = [t.texts[0] for t in offline.translate(lines)]
    assert expected[0] == "2024" and expected[2] == "12:30 🐕"
    digits = " ".join(["1234"] * 100)  # beyond the position table: kept, not refused
    job = engine.submit(["\n".join(lines), "* * *", digits], engine.defaults)
    served = [t.texts[0] for t in job.future.result(timeout=60)]
    assert served == ["\n".join(expected), "* * *", digits]


def joining_one_at_a_time(engine: Engine, texts: list[str]) -> list:
    """The translations of `texts`, each submitted alone, joining a batch already under way
    (rows at many positions side by side)."""
    jobs = []
    for text in texts:
        jobs.append(engine.submit([text], engine.defaults))
        time.sleep(0.002)
    return [job.future.result(timeout=60)[0] for job in jobs]


def test_rows_attending_in_groups_translate_as_the_translator_does(checkpoint):
    """Self-attention in groups of 4 hypotheses of similar length (rows of many lengths
    side by side, as sentences join and leave)."""
    limits = ServeLimits(kv_blocks=512, group_rows=4)
    engine = Engine.from_checkpoint(str(checkpoint), limits=limits)
    engine.start()
    texts = sentences(30, seed=11)
    expected = Translator.from_checkpoint(str(checkpoint), beam_size=5).translate(texts)
    got = joining_one_at_a_time(engine, texts)
    engine.stop()
    assert [g.texts for g in got] == [e.texts for e in expected]


@pytest.mark.parametrize(
    "options",
    [
        {"positions": "t5", "relative_buckets": 8, "relative_max_distance": 12},
        {"positions": "alibi"},
        {"positions": "shaw", "max_relative_position": 3, "relative_values": True},
        {"positions": "rope", "attention": "mla", "mla_kv_rank": 8, "mla_rope_dim": 4},
    ],
    ids=["t5", "alibi", "shaw", "mla"],
)
def test_relative_positions_and_latent_translate_as_the_translator_does(tmp_path, options):
    """Every row of a server's batch at its own position: its relative terms are its own;
    latent attention decodes from a pool of latents."""
    checkpoint = save_tiny_checkpoint(tmp_path, **options)
    engine = Engine.from_checkpoint(str(checkpoint), limits=ServeLimits(kv_blocks=512))
    engine.start()
    texts = sentences(16, seed=5)
    expected = Translator.from_checkpoint(str(checkpoint), beam_size=5).translate(texts)
    got = joining_one_at_a_time(engine, texts)
    engine.stop()
    for want, have in zip(expected, got, strict=True):
        assert have.texts == want.texts
        assert have.scores == pytest.approx(want.scores, abs=1e-4)


def test_a_latent_model_is_served_from_a_pool_of_latents(tmp_path):
    options = {"positions": "rope", "attention": "mla", "mla_kv_rank": 8, "mla_rope_dim": 4}
    engine = Engine.from_checkpoint(str(save_tiny_checkpoint(tmp_path, **options)))
    assert engine.pool.values is None
    assert engine.pool.keys.shape[-2:] == (1, 8 + 4)  # one latent [c ‖ k^R] per position


def test_mixed_options_and_prefixes_from_many_threads(checkpoint, engine):
    texts = sentences(24, seed=7)
    prefixes = [" ".join(t.split()[:2]) if i % 3 == 0 else "" for i, t in enumerate(texts)]
    options = [(1, 1), (5, 1), (3, 2), (5, 5)]
    results = {}

    def client(i: int) -> None:
        beam, n_best = options[i % len(options)]
        decode = dataclasses.replace(engine.defaults, beam_size=beam, n_best=n_best)
        job = engine.submit(Texts.of([texts[i]], prefixes=[prefixes[i]]), decode)
        results[i] = job.future.result(timeout=60)[0]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, text in enumerate(texts):
        beam, n_best = options[i % len(options)]
        offline = Translator.from_checkpoint(str(checkpoint), beam_size=beam, n_best=n_best)
        (want,) = offline.translate(Texts.of([text], prefixes=[prefixes[i]]))
        assert results[i].texts == want.texts, (i, text)
    wait_idle(engine)
    # What is still in use is the prefix cache's (admission evicts it under pressure);
    # evicted, every block is free.
    assert engine.stats().kv_blocks_used == engine.prefixes.blocks_held
    while engine.prefixes.evict():
        pass
    assert engine.pool.n_free == engine.pool.n_blocks


def test_prefix_cache_hits_translate_as_misses_do(checkpoint, engine):
    text = "ein mann liest das buch im schnee und zwei hunde spielen"
    words = ["zwei", "hunde", "spielen", "im", "schnee", "und", "eine", "frau", "liest"]
    offline = {b: Translator.from_checkpoint(str(checkpoint), beam_size=b) for b in (1, 4)}
    # Each prefix extends the one before (a user typing), across block boundaries (size 4);
    # then the same prefixes again with another beam size.
    for beam in (4, 1):
        decode = dataclasses.replace(engine.defaults, beam_size=beam, n_best=1)
        for n in (2, 3, 6, 9):
            prefix = " ".join(words[:n])
            hits = engine.prefixes.hits
            (got,) = engine.submit(Texts.of([text], prefixes=[prefix]), decode).future.result(
                timeout=60
            )
            (want,) = offline[beam].translate(Texts.of([text], prefixes=[prefix]))
            assert got.texts == want.texts
            assert got.scores == pytest.approx(want.scores, abs=1e-4)
            assert engine.prefixes.hits == hits + (n > 2 or beam == 1)
    assert engine.prefixes.reused_tokens > 0
    # An exact repeat is answered from the translation cache, without decoding.
    hits, generated = engine.translations.hits, engine.stats().generated_tokens
    (again,) = engine.submit(Texts.of([text], prefixes=[prefix]), decode).future.result(timeout=60)
    assert again == got and engine.translations.hits == hits + 1
    assert engine.stats().generated_tokens == generated


def test_requests_of_two_scopes_share_no_cached_work(engine):
    """Two API keys never share a cache entry: a hit answers faster, which would tell one key
    what the other has translated. Within a scope the caches serve as before."""
    request = Texts.of(["ein mann liest das buch im schnee"], prefixes=["a man reads"])

    def translate(scope: str, beam: int = 2) -> tuple:
        """The translation, and the hits it made in the translation, encoder and prefix
        caches."""
        decode = dataclasses.replace(engine.defaults, beam_size=beam, n_best=1)
        counts = engine.translations.hits, engine.encoder_outputs.hits, engine.prefixes.hits
        (found,) = engine.submit(request, decode, scope=scope).future.result(timeout=60)
        wait_idle(engine)  # the prefix is cached when its sentence leaves
        after = engine.translations.hits, engine.encoder_outputs.hits, engine.prefixes.hits
        return found, tuple(b - a for a, b in zip(counts, after, strict=True))

    first, _ = translate("key:a")
    for scope in ("key:b", None):
        again, hits = translate(scope)
        assert again == first and hits == (0, 0, 0), scope
    assert translate("key:a") == (first, (1, 0, 0))
    # Another beam is another translation: the scope's encoder output and prefix serve it.
    assert translate("key:a", beam=3)[1] == (0, 1, 1)


def wait_idle(engine, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = engine.stats()
        if not stats.running_sentences and not stats.queue_sentences:
            return stats
        time.sleep(0.02)
    raise AssertionError(f"engine still busy: {engine.stats()}")


@pytest.mark.slow  # 20 s: a thousand requests through the engine
def test_no_leak_after_a_thousand_requests_some_cancelled_some_refused(checkpoint):
    limits = ServeLimits(
        kv_blocks=300, block_size=4, cache_entries=16, max_request_sentences=4, max_queue=64
    )
    engine = Engine.from_checkpoint(str(checkpoint), limits=limits)
    rng = random.Random(0)
    texts = sentences(200, seed=11)
    jobs, failed, refused, cancelled, queue_full = [], [], 0, 0, 0
    # The queue filled before decoding starts: one request is refused with QueueFull however
    # fast the machine decodes the rest (a busy machine's engine may never fall behind).
    while not queue_full:
        try:
            jobs.append(engine.submit(texts[len(jobs) * 3 : len(jobs) * 3 + 3], engine.defaults))
        except QueueFull:
            queue_full += 1
    engine.start()

    def submit(texts: list[str], decode):
        nonlocal queue_full
        while True:
            try:
                return engine.submit(texts, decode)
            except QueueFull as full:  # as a client would: wait, then try again
                queue_full += 1
                time.sleep(full.retry_after / 100)

    try:
        for i in range(1000):
            kind = rng.random()
            beam = rng.choice([1, 2, 5])
            decode = dataclasses.replace(engine.defaults, beam_size=beam, n_best=1)
            if kind < 0.05:
                with pytest.raises(ConfigError):
                    engine.submit([texts[i % 200]], dataclasses.replace(decode, beam_size=0))
                refused += 1
                continue
            if kind < 0.1:
                with pytest.raises(RequestTooLarge):
                    engine.submit(texts[:5], decode)
                refused += 1
                continue
            if kind < 0.12:  # 32 beams need more KV blocks than the pool has: refused later
                wide = dataclasses.replace(decode, beam_size=32)  # (a sentence the table holds)
                failed.append(submit([" ".join(WORDS * 2)], wide))
                continue
            job = submit(rng.sample(texts, rng.randint(1, 3)), decode)
            if kind < 0.3:
                if kind < 0.2:
                    time.sleep(0.002)  # some cancelled while decoding, some while queued
                job.cancel()
                cancelled += 1
            jobs.append(job)
        for job in jobs:
            if not job.future.cancelled():
                assert len(job.future.result(timeout=120)) >= 1
        for job in failed:
            with pytest.raises(RequestTooLarge, match="KV blocks"):
                job.future.result(timeout=120)
        stats = wait_idle(engine)
    finally:
        engine.stop()
    assert refused and cancelled and queue_full and failed
    assert stats.kv_blocks_used == 0 and stats.kv_blocks_reserved == 0
    assert engine.pool.n_free == engine.pool.n_blocks and set(engine.pool.refs.tolist()) == {0}
    assert all(n <= 16 for n in stats.cache_entries.values())
    assert stats.cache_hits["translation"] > 0  # texts repeat: some answered without decoding
    assert not engine.batch.finished and not engine.batch.lanes


def test_a_failing_step_answers_its_requests_with_an_error_and_serving_goes_on(
    checkpoint, engine, monkeypatch
):
    decode = dataclasses.replace(engine.defaults, beam_size=3)

    def broken():
        raise RuntimeError("injected\nfailure")

    monkeypatch.setattr(engine.batch, "step", broken)
    # One request: its sentences are queued together and admitted together, so all of them
    # meet the broken step (separate requests could reach the fresh batch that replaces it).
    job = engine.submit(sentences(5), decode)
    with pytest.raises(TmtError, match="decoding failed: injected failure"):
        job.future.result(timeout=60)
    assert engine.stats().kv_blocks_used == 0 and engine.stats().kv_blocks_reserved == 0
    assert engine.batch.step != broken  # a fresh batch took over
    (done,) = engine.submit(["hunde spielen"], decode).future.result(timeout=60)
    assert done.texts[0]


def test_two_sentences_larger_than_the_pool_fail_their_request_and_serving_goes_on(checkpoint):
    """Both sentences are refused by admission: the request's answer is set once (a second
    answer on one future killed the decoding thread), and the next request is served."""
    engine = Engine.from_checkpoint(str(checkpoint), limits=ServeLimits(kv_blocks=40))
    engine.start()
    try:
        wide = dataclasses.replace(engine.defaults, beam_size=5)
        job = engine.submit([" ".join(WORDS), " ".join(WORDS[::-1])], wide)
        with pytest.raises(RequestTooLarge, match="KV blocks"):
            job.future.result(timeout=60)
        greedy = dataclasses.replace(engine.defaults, beam_size=1)
        (done,) = engine.submit(["hunde spielen"], greedy).future.result(timeout=60)
        assert done.texts[0] and engine.failure is None
        wait_idle(engine)
        assert engine.stats().kv_blocks_reserved == 0
    finally:
        engine.stop()


def test_a_request_refused_in_part_frees_its_sentences_that_were_admitted(checkpoint):
    """One sentence fits the pool and runs, the next never could: the request fails, and its
    running sentence leaves the batch instead of answering a failed request."""
    engine = Engine.from_checkpoint(str(checkpoint), limits=ServeLimits(kv_blocks=60))
    engine.start()
    try:
        decode = dataclasses.replace(engine.defaults, beam_size=2)
        job = engine.submit(["hunde", " ".join(WORDS * 2)], decode)
        with pytest.raises(RequestTooLarge):
            job.future.result(timeout=60)
        stats = wait_idle(engine)
        assert stats.kv_blocks_reserved == 0 and engine.failure is None
    finally:
        engine.stop()


def fail_for(monkeypatch, length_penalty: float) -> None:
    """Make the search step raise for the lane of sentences with `length_penalty`."""
    from transformer_mt.serve.engine import scheduler

    real = scheduler.beam_step

    def beam_step(state, log_probs, cfg, ids, finished):
        if cfg.length_penalty == length_penalty:
            raise OverflowError(34, "Numerical result out of range")
        return real(state, log_probs, cfg, ids, finished)

    monkeypatch.setattr(scheduler, "beam_step", beam_step)


def test_a_failing_request_fails_alone_while_a_concurrent_one_decodes(
    checkpoint, engine, monkeypatch
):
    fail_for(monkeypatch, 0.625)
    texts = sentences(6, seed=3)
    offline = Translator.from_checkpoint(str(checkpoint), beam_size=5).translate(texts)
    good = engine.submit(texts, engine.defaults)
    bad = engine.submit(
        ["hunde spielen"], dataclasses.replace(engine.defaults, length_penalty=0.625)
    )
    with pytest.raises(TmtError, match="decoding failed: .*out of range"):
        bad.future.result(timeout=60)
    assert [t.texts for t in good.future.result(timeout=60)] == [t.texts for t in offline]
    wait_idle(engine)
    assert engine.stats().kv_blocks_reserved == 0 and engine.failure is None
    (again,) = engine.submit(texts[:1], engine.defaults).future.result(timeout=60)
    assert again.texts == offline[0].texts


@pytest.mark.parametrize("length_penalty", [1e308, -1e308])
def test_extreme_numbers_from_one_request_leave_a_concurrent_one_alone(
    checkpoint, engine, length_penalty
):
    """Refused at submit where the decode settings bound the number, otherwise failing
    alone: the other request gets its translations either way."""
    texts = sentences(4, seed=9)
    offline = Translator.from_checkpoint(str(checkpoint), beam_size=5).translate(texts)
    good = engine.submit(texts, engine.defaults)
    extreme = dataclasses.replace(engine.defaults, length_penalty=length_penalty)
    try:
        bad = engine.submit(["ein hund", "zwei katzen"], extreme)
        bad.future.exception(timeout=60)
    except TmtError:
        pass
    assert [t.texts for t in good.future.result(timeout=60)] == [t.texts for t in offline]
    (again,) = engine.submit(texts[:1], engine.defaults).future.result(timeout=60)
    assert again.texts == offline[0].texts and engine.failure is None


def test_a_dead_decoding_thread_fails_waiting_requests_and_refuses_new_ones(engine, monkeypatch):
    def broken():
        raise RuntimeError("admission broke")

    monkeypatch.setattr(engine.admission, "admit", broken)
    job = engine.submit(["hunde spielen"], engine.defaults)
    with pytest.raises(TmtError, match="engine stopped: admission broke"):
        job.future.result(timeout=60)
    assert isinstance(engine.failure, RuntimeError)
    with pytest.raises(TmtError, match="has stopped"):
        engine.submit(["hunde"], engine.defaults)


def test_the_engine_and_the_translator_refuse_a_prefix_count_through_the_one_check(engine):
    for refuse in (
        lambda: engine.submit(
            Texts.of(["ein hund", "zwei katzen"], prefixes=["a"]), engine.defaults
        ),
        lambda: engine.translator.translate(Texts.of(["ein hund", "zwei katzen"], prefixes=["a"])),
    ):
        with pytest.raises(TextsCountError) as err:
            refuse()
        assert (err.value.field, err.value.given, err.value.n_texts) == ("prefixes", 1, 2)
    assert engine.stats().queue_sentences == 0


def test_every_decode_field_but_max_tokens_changes_the_cache_key_and_the_lane():
    """Each DecodeConfig field changed in turn: a different translation-cache key and a
    different scheduler lane, except for the fields named output-neutral."""
    from transformer_mt.config import OUTPUT_NEUTRAL_FIELDS, DecodeConfig
    from transformer_mt.serve.engine.caches import translation_key
    from transformer_mt.serve.engine.scheduler import lane_key

    base = DecodeConfig()
    hints = typing.get_type_hints(DecodeConfig)
    for f in dataclasses.fields(DecodeConfig):
        value = getattr(base, f.name)
        if isinstance(value, bool):
            other = not value
        elif isinstance(value, str):  # a Literal: another of its choices
            other = next(c for c in typing.get_args(hints[f.name]) if c != value)
        else:
            other = value + 1
        changed = dataclasses.replace(base, **{f.name: other})
        key = translation_key("a", "", NO_TAGS, changed)
        same = key == translation_key("a", "", NO_TAGS, base)
        assert same == (f.name in OUTPUT_NEUTRAL_FIELDS), f
        assert (lane_key(changed) == lane_key(base)) == (f.name in OUTPUT_NEUTRAL_FIELDS), f
    assert set(OUTPUT_NEUTRAL_FIELDS) == {"max_tokens"}


@pytest.mark.parametrize(
    "change",
    [
        {"min_len": 12},
        {"length_norm": "none"},
        {"length_norm": "average"},
        {"no_repeat_ngram_size": 1, "disable_unk": True},
    ],
)
def test_a_cached_translation_never_answers_other_settings(checkpoint, engine, change):
    texts = sentences(12, seed=4)
    engine.submit(texts, engine.defaults).future.result(timeout=60)
    hits = engine.translations.hits
    got = engine.submit(texts, dataclasses.replace(engine.defaults, **change)).future.result(60)
    assert engine.translations.hits == hits  # decoded again, not taken from the cache
    want = Translator.from_checkpoint(str(checkpoint), **change).translate(texts)
    for have, expected in zip(got, want, strict=True):
        assert have.texts == expected.texts
        assert have.scores == pytest.approx(expected.scores, abs=1e-4)


def test_a_stream_never_shows_a_character_of_which_only_some_bytes_came(tmp_path):
    """With byte fallback, "😀" is four byte pieces: the text of the first three ends in
    replacement characters, which events then showed ("�", "��", "���", "😀")."""
    from transformer_mt.config import TokenizerConfig
    from transformer_mt.data.tokenizer_training import train_tokenizers
    from transformer_mt.serve.engine.engine import streamable

    texts = [" ".join(WORDS)] * 5
    tokenizer = train_tokenizers(
        TokenizerConfig(vocab_size=300, byte_fallback=True), texts, texts, tmp_path
    ).tgt
    ids = tokenizer.encode("mann 😀")
    shown = [streamable(tokenizer.decode(ids[:n])) for n in range(1, len(ids) + 1)]
    assert shown[-1] == "mann 😀" and all("\ufffd" not in text for text in shown)
    assert any("\ufffd" in tokenizer.decode(ids[:n]) for n in range(1, len(ids)))


def test_a_sentence_longer_than_the_position_table_is_refused_naming_its_text(engine):
    """It had been cut to the table and answered 200, its translation ending early, without
    a word to the client (`tmt translate` says so on stderr; a client is told nothing)."""
    long = " ".join(WORDS * 10)  # one sentence of more than 63 tokens
    n_tokens = len(engine.translator.encoding.src.encode(long))
    with pytest.raises(RequestTooLarge) as refused:
        engine.submit(["ein mann", long], engine.defaults)
    assert str(refused.value) == (
        f"text[1]: a sentence of {n_tokens} source tokens; the model reads at most 63"
    )
    (fits,) = engine.submit(["ein mann"], engine.defaults).future.result(timeout=60)
    assert fits.texts


def test_an_engine_started_twice_still_stops_and_a_stopped_one_is_not_restarted(engine):
    """A second start had made a second decoding thread, and stop() waited for ever on one
    that nothing woke."""

    def decoders() -> int:
        return [t.name for t in threading.enumerate()].count("tmt-decoder")

    running = decoders()
    engine.start()  # e.g. by start_in_thread, given an engine started already
    assert decoders() == running
    stopping = threading.Thread(target=engine.stop)
    stopping.start()
    stopping.join(60)
    assert not stopping.is_alive()
    with pytest.raises(TmtError, match="the engine has been stopped"):
        engine.start()


def test_a_stopped_engine_is_not_served_again(engine):
    """It had answered /health 200 and every translation 503."""
    pytest.importorskip("uvicorn")
    from transformer_mt.serve.server import start_in_thread

    engine.stop()
    with pytest.raises(TmtError, match="the engine has been stopped"):
        start_in_thread(engine)


def test_a_sparse_attention_model_is_refused_saying_why_and_what_serves_it(tmp_path):
    """It had been `model.attention_pattern=local: serve needs full`."""
    checkpoint = save_tiny_checkpoint(tmp_path, attention_pattern="local", attention_window=2)
    with pytest.raises(SettingError) as caught:
        Engine.from_checkpoint(str(checkpoint))
    assert caught.value.reason.startswith("the serving engine's paged cache holds every key")
    assert caught.value.reason.endswith("translate this model with tmt translate")
