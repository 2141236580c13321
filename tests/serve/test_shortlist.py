"""`tmt serve --shortlist`: the engine gives each slot its sentence's ids, so that requests
served together translate as `Translator.translate` with the same shortlist does, one by one
(a sentence's ids do not depend on its batch), with beams, greedy rows and glossaries mixed."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.documents.conftest import reversing_checkpoint  # noqa: F401 (the model fixture)
from transformer_mt.artifacts import load_for_inference
from transformer_mt.inference.glossary import Glossary
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator
from transformer_mt.serve.engine import Engine, ServeLimits
from transformer_mt.shortlist.vmap import write_vmap

TEXTS = ["ein mann fährt rad", "das buch und der hund", "hund", "kinder spielen im park", ""]


@pytest.fixture(scope="module")
def shortlist(reversing_checkpoint, tmp_path_factory):  # noqa: F811
    """Each source piece lists the 4 target pieces after it in the vocabulary: a strong,
    different restriction per sentence."""
    bundle = load_for_inference(reversing_checkpoint)
    src, tgt = bundle.src_tokenizer, bundle.tgt_tokenizer
    n = tgt.vocab_size
    lists = {
        src.id_to_piece(i): [tgt.id_to_piece(4 + (i + k) % (n - 4)) for k in range(1, 5)]
        for i in range(4, src.vocab_size)
    }
    path = tmp_path_factory.mktemp("shortlist") / "list.vmap"
    write_vmap(path, [tgt.id_to_piece(5)], lists)
    return path


@pytest.fixture(scope="module")
def engine(reversing_checkpoint, shortlist):  # noqa: F811
    limits = ServeLimits(kv_blocks=1024, block_size=4)
    engine = Engine.from_checkpoint(str(reversing_checkpoint), limits=limits, shortlist=shortlist)
    engine.start()
    yield engine
    engine.stop(drain=False)


def test_served_requests_translate_as_the_translator_with_the_shortlist(
    reversing_checkpoint,  # noqa: F811
    shortlist,
    engine,
):
    offline = {
        beam: Translator.from_checkpoint(
            str(reversing_checkpoint), beam_size=beam, shortlist=shortlist
        )
        for beam in (1, 3)
    }
    plain = Translator.from_checkpoint(str(reversing_checkpoint), beam_size=3)
    terms = Glossary.of_pairs([("hund", "rad")], ignore_case=True)
    asked = [(text, beam, g) for text in TEXTS for beam in (1, 3) for g in (None, terms)]

    def submit(item):
        text, beam, glossary = item
        decode = dataclasses.replace(engine.defaults, beam_size=beam)
        glossaries = None if glossary is None else [glossary]
        return engine.submit(Texts.of([text], glossaries=glossaries), decode)

    with ThreadPoolExecutor(8) as pool:
        jobs = list(pool.map(submit, asked))
    for (text, beam, glossary), job in zip(asked, jobs, strict=True):
        (have,) = job.future.result(timeout=60)
        (want,) = offline[beam].translate(Texts.of([text], glossary=glossary))
        assert have.texts == want.texts, (text, beam, glossary)
        assert have.scores == pytest.approx(want.scores, abs=1e-4)
    # The shortlist changed translations: it is in force, not ignored.
    assert plain.translate(TEXTS) != offline[3].translate(TEXTS)
