"""Per-request languages: texts of many directions share the engine's batches and translate as
the Translator (and `tmt translate --tgt-lang`) does one direction at a time; /v1/languages;
the refusals naming `source` or `target`; `source: "auto"`."""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from tests.conftest import MULTILINGUAL, WORDS  # noqa: E402
from tests.serve.real_engine import serving  # noqa: E402
from tests.serve.test_served import post, stream  # noqa: E402
from transformer_mt.cli import main  # noqa: E402
from transformer_mt.config import DecodeConfig  # noqa: E402
from transformer_mt.data.specials import SpecialTokens  # noqa: E402
from transformer_mt.errors import SettingError  # noqa: E402
from transformer_mt.inference.languages import Direction  # noqa: E402
from transformer_mt.inference.line_settings import LineSettings  # noqa: E402
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.langid import installed  # noqa: E402
from transformer_mt.serve.engine import Engine, ServeLimits  # noqa: E402
from transformer_mt.serve.engine.caches import translation_key  # noqa: E402
from transformer_mt.serve.http import answers, schema  # noqa: E402
from transformer_mt.serve.http.app import create_app  # noqa: E402

needs_lingua = pytest.mark.skipif(not installed(), reason="lingua (the langid extra)")
DIRECTIONS = [*MULTILINGUAL, ("de", "fr"), ("fr", "de")]  # trained, then zero-shot
# Real sentences for the identifier (the tiny model reads them as best it can).
SENTENCES = {
    "de": "Zwei junge Kinder spielen im Schnee.",
    "fr": "Deux jeunes enfants jouent dans la neige.",
    "en": "Two young children are playing in the snow.",
}


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 10))) for _ in range(n)]


@pytest.fixture(scope="module")
def nllb_style(tmp_path_factory, multilingual_checkpoint):
    """The multilingual model told its direction as NLLB is: the source language's tag in
    front of the source, the target's forced first, so that two targets of one text share
    the source's ids (and the encoder cache) and differ only in the forced prefix."""
    state = torch.load(multilingual_checkpoint, weights_only=True)
    tags = state["specials"]["language_tags"]
    specials = SpecialTokens(language_tags=tags, source_tag="source", target_tag=True)
    state["specials"] = specials.to_dict()
    path = tmp_path_factory.mktemp("nllb") / "model.pt"
    torch.save(state, path)
    return path


@pytest.mark.parametrize("style", ["target tag in front", "forced target tag"])
@pytest.mark.parametrize("beam_size", [1, 5])
def test_texts_of_many_directions_share_the_batch_and_translate_one_direction_at_a_time(
    multilingual_checkpoint, nllb_style, style, beam_size
):
    path = str(multilingual_checkpoint if style == "target tag in front" else nllb_style)
    engine = Engine.from_checkpoint(path, limits=ServeLimits(kv_blocks=4096, block_size=4))
    together = []  # the targets of the running sentences, at each step
    step = engine._step

    def noting_the_targets() -> None:
        together.append({w.direction.tgt_lang for w in engine.admission.running.values()})
        step()

    engine._step = noting_the_targets
    texts = sentences(8, seed=beam_size)
    rounds = [["" if i % 3 else WORDS[i] for i in range(len(texts))]]
    rounds.append([f"{prefix} {WORDS[2]}".strip() for prefix in rounds[0]])  # one word more
    decode = dataclasses.replace(engine.defaults, beam_size=beam_size)
    # Every text in every direction, all queued before the engine starts (one batch); then
    # again with longer prefixes, which start from the prefix cache: the same text and prefix
    # into two targets must never share an entry there.
    first = {
        pair: engine.submit(Texts.of(texts, directions=[pair] * 8, prefixes=rounds[0]), decode)
        for pair in DIRECTIONS
    }
    engine.start()
    try:
        got = {(pair, 0): job.future.result(timeout=120) for pair, job in first.items()}
        for pair in DIRECTIONS:
            job = engine.submit(Texts.of(texts, directions=[pair] * 8, prefixes=rounds[1]), decode)
            got[pair, 1] = job.future.result(timeout=120)
    finally:
        engine.stop()
    assert max(map(len, together)) == 3  # en, de and fr decoded in one step
    assert engine.prefixes.hits > 0
    for pair in DIRECTIONS:
        offline = Translator.from_checkpoint(
            path, beam_size=beam_size, lines=LineSettings(src_lang=pair[0], tgt_lang=pair[1])
        )
        for n, prefixes in enumerate(rounds):
            expected = offline.translate(Texts.of(texts, prefixes=prefixes))
            for want, have in zip(expected, got[pair, n], strict=True):
                assert have.texts == want.texts, pair
                assert have.scores == pytest.approx(want.scores, abs=1e-4), pair
    into = {t: [r.texts for r in got[("de", t), 0]] for t in ("en", "fr")}
    assert into["en"] != into["fr"]  # the tags matter
    assert engine.stats().kv_blocks_reserved == 0


def test_the_cache_key_holds_the_tags_of_the_direction_not_its_names():
    base = Direction("de", "en", (4,), ())
    key = translation_key("a", "", base, DecodeConfig())
    for other in (
        dataclasses.replace(base, source_prefix=(5,)),
        dataclasses.replace(base, target_prefix=(4,)),
    ):
        assert translation_key("a", "", other, DecodeConfig()) != key
    renamed = dataclasses.replace(base, src_lang="fr")  # a model told fr->en and de->en alike
    assert translation_key("a", "", renamed, DecodeConfig()) == key


def test_a_model_without_tags_serves_its_own_direction_only(checkpoint):
    with pytest.raises(SettingError, match="tgt_lang=fr: the model has no such language"):
        Engine.from_checkpoint(str(checkpoint), lines=LineSettings(tgt_lang="fr"))  # --tgt-lang fr


# --- over HTTP --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(multilingual_checkpoint):
    yield from serving(multilingual_checkpoint, ServeLimits(kv_blocks=2000))


@pytest.fixture(scope="module")
def served_without_tags(checkpoint):
    for url, _ in serving(checkpoint, ServeLimits()):
        yield url


def translate(url: str, **body) -> dict:
    status, answer = post(f"{url}/v1/translate", json.dumps(body).encode())
    assert status == 200, answer
    return answer


def tmt_translate(checkpoint, tmp_path, texts: list[str], tgt_lang: str, beam: int) -> list[str]:
    source, out = tmp_path / f"in.{tgt_lang}", tmp_path / f"out.{tgt_lang}"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    args = ["translate", "--checkpoint", str(checkpoint), "--input", str(source)]
    source = "en" if tgt_lang == "de" else "de"  # a direction the model offers
    args += ["--output", str(out), "--beam-size", str(beam), "--tgt-lang", tgt_lang]
    args += ["--src-lang", source]
    assert main(args) == 0
    return out.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("beam", [1, 4])
def test_concurrent_requests_into_many_targets_get_what_tmt_translate_prints(
    multilingual_checkpoint, served, tmp_path, beam
):
    url, _ = served
    texts = sentences(24, seed=10 + beam)
    targets = ["en", "de", "fr"]

    def client(i: int) -> str:
        target = targets[i % 3]
        body = {"text": texts[i], "target": target, "beam_size": beam}
        if target != "en" or i % 2:  # into en: from the default source, de, or from fr
            body["source"] = [code for code in ("en", "fr", "de") if code != target][i % 2]
        (item,) = translate(url, **body)["translations"]
        return item["text"]

    with ThreadPoolExecutor(12) as pool:
        got = list(pool.map(client, range(len(texts))))
    for k, target in enumerate(targets):
        rows = range(k, len(texts), 3)
        expected = tmt_translate(
            multilingual_checkpoint, tmp_path, [texts[i] for i in rows], target, beam
        )
        assert [got[i] for i in rows] == expected, target


def test_languages_lists_the_trained_and_zero_shot_directions_and_the_default(served):
    url, _ = served
    with urllib.request.urlopen(f"{url}/v1/languages", timeout=10) as response:
        answer = json.load(response)
    pairs = lambda key: [(d["source"], d["target"]) for d in answer[key]]  # noqa: E731
    assert answer["default"] == {"source": "de", "target": "en"}
    assert answer["languages"] == ["de", "en", "fr"]
    assert pairs("trained") == list(MULTILINGUAL)
    assert pairs("zero_shot") == [("de", "fr"), ("fr", "de")]
    assert answer["auto"] == installed()


def test_a_target_alone_comes_from_the_one_language_trained_into_it(served):
    """As `tmt translate --tgt-lang de`: the default source, de, makes no direction into de;
    the model's only one into de is from en (it had been refused, naming de->de)."""
    url, _ = served
    text = f"{WORDS[0]} {WORDS[1]} {WORDS[2]}"
    alone = translate(url, text=text, target="de", beam_size=1)["translations"]
    assert alone == translate(url, text=text, source="en", target="de", beam_size=1)["translations"]


def test_a_model_without_tags_lists_its_one_direction(served_without_tags):
    with urllib.request.urlopen(f"{served_without_tags}/v1/languages", timeout=10) as response:
        answer = json.load(response)
    assert answer["trained"] == [answer["default"]] == [{"source": "de", "target": "en"}]
    assert answer["zero_shot"] == []


REFUSED = [
    # (body beside the text, field, message)
    ({"target": "cs"}, "target", "target=cs: the model has no such language; it knows de, en, fr"),
    ({"source": "cs"}, "source", "source=cs: the model has no such language; it knows de, en, fr"),
    ({"source": "en"}, "target", "target=en: the model does not translate en->en; it translates"),
    ({"target": 3}, "target", "target: expected a language code such as 'de', got a number (3)"),
    ({"target": ""}, "target", "target: expected a language code such as 'de', got an empty"),
    ({"source": "d\ne"}, "source", "source=d\\ne: not a language code"),
    (
        {"target": "x" * 40},
        "target",
        f"target={'x' * 32}...: not a language code (at most 32 printable",
    ),
]


@pytest.mark.parametrize(("body", "field", "message"), REFUSED)
def test_a_language_the_model_lacks_is_refused_naming_its_field(served, body, field, message):
    url, _ = served
    status, answer = post(f"{url}/v1/translate", json.dumps({"text": "ein hund", **body}).encode())
    assert (status, answer["error"]["field"]) == (400, field), answer
    assert answer["error"]["message"].startswith(message)
    assert translate(url, text="ein hund", target="fr")["translations"][0]["text"] is not None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"target": "fr"}, "target=fr: the model has no such language; it knows de, en"),
        ({"target": "de"}, "target=de: the model does not translate de->de; it translates de->en"),
        ({"source": "en"}, "target=en: the model does not translate en->en; it translates de->en"),
    ],
)
def test_a_model_without_tags_refuses_another_direction(served_without_tags, body, message):
    status, answer = post(
        f"{served_without_tags}/v1/translate", json.dumps({"text": "ein hund", **body}).encode()
    )
    assert status == 400 and answer["error"]["message"] == message, answer
    assert translate(served_without_tags, text="ein hund", source="de", target="en")


def test_a_typed_tag_is_taken_out_and_counted_never_switching_the_target(
    multilingual_checkpoint, served
):
    url, engine = served
    text = f">>fr<< {WORDS[0]} {WORDS[1]}"
    before = engine.stats().tagged_texts
    (item,) = translate(url, text=text, source="en", target="de", beam_size=1)["translations"]
    german = Translator.from_checkpoint(
        str(multilingual_checkpoint), beam_size=1, lines=LineSettings(src_lang="en", tgt_lang="de")
    )
    assert item["text"] == german.translate([text])[0].texts[0]
    assert engine.stats().tagged_texts == before + 1
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        assert f"tmt_tagged_texts_total {before + 1}.0" in response.read().decode()


@needs_lingua
def test_auto_identifies_each_text_and_translates_as_the_named_source_would(served):
    url, _ = served
    texts = [SENTENCES["de"], SENTENCES["fr"], "1 2 3"]
    for target, sources in (("en", ["de", "fr", "de"]), ("de", ["en", "fr", "en"])):
        given = texts if target == "en" else [SENTENCES["en"], SENTENCES["fr"], "1 2 3"]
        answer = translate(url, text=given, source="auto", target=target)
        found = [item["detected"] for item in answer["translations"]]
        assert [d["language"] for d in found] == sources
        assert all(d["confidence"] > 0.5 for d in found[:2]) and found[2]["confidence"] == 0.0
        for text, source, item in zip(given, sources, answer["translations"], strict=True):
            (named,) = translate(url, text=text, source=source, target=target)["translations"]
            assert item["text"] == named["text"] and "detected" not in named
    body = {"text": texts, "source": "auto", "target": "en", "beam_size": 1}
    result = dict(stream(url, body))["result"]
    assert result["translations"] == translate(url, **body)["translations"]


@needs_lingua
def test_auto_for_a_target_nothing_is_translated_into_names_the_target(served):
    url, _ = served
    status, answer = post(
        f"{url}/v1/translate", json.dumps({"text": "x", "source": "auto", "target": "cs"}).encode()
    )
    assert status == 400 and answer["error"]["field"] == "target"
    assert answer["error"]["message"] == "target=cs: the model translates into de, en, fr"


def test_auto_without_lingua_is_a_501_saying_what_to_install(monkeypatch, engine):
    monkeypatch.setitem(sys.modules, "lingua", None)  # `import lingua` raises ImportError
    client = TestClient(create_app(engine), base_url="http://127.0.0.1:8000")
    response = client.post("/v1/translate", json={"text": "ein hund", "source": "auto"})
    assert response.status_code == 501, response.text
    error = response.json()["error"]
    assert error["field"] == "source" and "pip install 'transformer_mt[langid]'" in error["message"]


def test_the_languages_body_and_its_openapi_model_have_the_same_keys(engine):
    body = answers.languages_json(engine.languages)
    assert set(schema.LanguagesResponse.model_fields) == set(body)
    client = TestClient(create_app(engine), base_url="http://127.0.0.1:8000")
    assert client.get("/v1/languages").json() == body
    assert "/v1/languages" in client.get("/openapi.json").json()["paths"]
