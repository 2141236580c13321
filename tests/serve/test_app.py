"""The HTTP API in process (Starlette's TestClient) against the fake engine: every refusal
names its field and leaves the server serving; results, streams, metrics, health, the page."""

from __future__ import annotations

import json
import logging
import re
import typing

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from tests.serve.fakes import FAIL, RETRY_AFTER, FakeEngine, fake_translation  # noqa: E402
from transformer_mt.config import DecodeConfig  # noqa: E402
from transformer_mt.inference.requests import TextsCountError  # noqa: E402
from transformer_mt.serve.http import api, app, schema  # noqa: E402
from transformer_mt.serve.http.app import create_app  # noqa: E402
from transformer_mt.serve.http.body import ApiError  # noqa: E402

GOOD = {"text": ["ein kleiner hund", "zwei katzen"]}
# The address create_app's server listens on by default: a Host it answers.
BASE_URL = "http://127.0.0.1:8000"


@pytest.fixture
def client(engine):
    return TestClient(create_app(engine), base_url=BASE_URL, raise_server_exceptions=False)


def assert_served(client, body=GOOD):
    response = client.post("/v1/translate", json=body)
    assert response.status_code == 200, response.text
    texts = [t["text"] for t in response.json()["translations"]]
    assert texts == [fake_translation(text) for text in body["text"]]


LONG = "x" * 201  # FakeLimits.max_sentence_chars is 200
BAD_BODIES = [
    # (body, status, field, words the message must hold)
    (b'{"text": "caf\xe9"}', 400, "body", ["UTF-8", "0xe9"]),
    (b'{"text": "a",', 400, "body", ["not JSON"]),
    (b'["a", "b"]', 400, "body", ["object", "a list"]),
    (b'{"text": "a", "length_penalty": NaN}', 400, "body", ["NaN"]),
    (b"[" * 100_000, 400, "body", ["nested"]),
    (b'{"text": "a", "colour": ' + b"9" * 5000 + b"}", 400, "body", ["more than 4300 digits"]),
    (b'{"text": "x", "text": "a"}', 400, "body", ['the key "text" is given twice']),
    (b'{"text": "a", "length_penalty": 1' + b"0" * 400 + b"}", 400, "length_penalty", ["large"]),
    (b'{"text": "a", "max_len_a": -1' + b"0" * 400 + b"}", 400, "max_len_a", ["large"]),
    (b"{}", 400, "text", ["required"]),
    (b'{"txt": "a"}', 400, "txt", ["did you mean 'text'"]),
    (b'{"text": "a", "beam_sise": 2}', 400, "beam_sise", ["did you mean 'beam_size'"]),
    (b'{"text": "a", "colour": 2}', 400, "colour", ["valid keys", "n_best"]),
    (b'{"text": 5}', 400, "text", ["a number (5)"]),
    (b'{"text": []}', 400, "text", ["empty list"]),
    (b'{"text": ["a", 3]}', 400, "text", ["text[1]", "a number"]),
    (b'{"text": "\\ud800"}', 400, "text", ["surrogate"]),
    (b'{"text": "a", "\\ud800": 1}', 400, "\\ud800", ["unknown key"]),  # a 500 had been
    (b'{"text": "a", "beam_size": true}', 400, "beam_size", ["integer", "boolean"]),
    (b'{"text": "a", "beam_size": 2.5}', 400, "beam_size", ["integer", "2.5"]),
    (b'{"text": "a", "beam_size": "4"}', 400, "beam_size", ["a string"]),
    (b'{"text": "a", "length_penalty": false}', 400, "length_penalty", ["number", "boolean"]),
    (b'{"text": "a", "n_best": null}', 400, "n_best", ["null"]),
    (b'{"text": "a", "beam_size": 0}', 400, "beam_size", ["beam_size=0", "> 0"]),
    (b'{"text": "a", "beam_size": 2, "n_best": 3}', 400, "n_best", ["n_best=3", "beam_size=2"]),
    (b'{"text": "a", "max_len_a": -1}', 400, "max_len_a", ["max_len_a=-1"]),
    (b'{"text": "a", "length_penalty": 1e999}', 400, "length_penalty", ["finite"]),
    (b'{"text": ["a", "b"], "prefix": ["x"]}', 400, "prefix", ["1 prefixes for 2 texts"]),
    (b'{"text": "a", "prefix": 3}', 400, "prefix", ["a number"]),
    (json.dumps({"text": ["a"] * 9}).encode(), 413, "text", ["9 texts", "at most 8"]),
    (json.dumps({"text": ["a", LONG]}).encode(), 413, "text", ["text[1]", "201 characters"]),
    (json.dumps({"text": "a", "prefix": LONG}).encode(), 413, "prefix", ["at most 200"]),
    (b'{"text": "' + b"a" * 200_000 + b'"}', 413, "body", ["bytes"]),
]


@pytest.mark.parametrize(("body", "status", "field", "words"), BAD_BODIES)
def test_a_bad_request_is_refused_naming_its_field_and_the_next_is_served(
    client, body, status, field, words
):
    response = client.post("/v1/translate", content=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["status"], error["field"]) == (status, field)
    assert field in error["message"] and "decode." not in error["message"]
    for word in words:
        assert word in error["message"]
    assert_served(client)


def test_a_fault_of_the_servers_own_is_a_json_500_and_the_next_request_is_served(
    client, monkeypatch
):
    real = api.parse_request

    def broken(body, *args):
        if b"BUG" in body:
            raise KeyError("a bug")
        return real(body, *args)

    monkeypatch.setattr(app, "parse_request", broken)
    response = client.post("/v1/translate", json={"text": "BUG"})
    assert response.status_code == 500
    assert response.json()["error"]["message"] == "internal error (KeyError); the log has more"
    assert_served(client)


def test_a_rule_naming_two_settings_blames_the_one_the_request_set():
    defaults = DecodeConfig(beam_size=4, n_best=2)
    limits, languages = FakeEngine().limits, FakeEngine().languages
    with pytest.raises(ApiError) as refused:
        api.parse_request(b'{"text": "a", "beam_size": 1}', defaults, limits, languages)
    assert refused.value.field == "beam_size"
    body = b'{"text": "a", "length_penalty": 2, "n_best": 4}'
    parsed = api.parse_request(body, defaults, limits, languages)
    assert parsed.decode == DecodeConfig(beam_size=4, n_best=4, length_penalty=2.0)
    assert parsed.decode_keys == ("length_penalty", "n_best")
    assert isinstance(parsed.decode.length_penalty, float)


def test_a_full_queue_answers_429_with_retry_after(client, engine):
    per_job = engine.limits.max_request_sentences
    fillers = [  # jobs that hold the queue for the whole test (10,000 steps each)
        engine.submit(["w " * 10_000] * per_job, engine.defaults)
        for _ in range(engine.limits.max_queue // per_job)
    ]
    response = client.post("/v1/translate", json=GOOD)
    assert response.status_code == 429
    assert response.headers["Retry-After"] == str(int(RETRY_AFTER) + 1)  # whole seconds, up
    assert response.json()["error"]["status"] == 429
    for job in fillers:
        job.cancel()
    assert_served(client)


def test_an_engine_fault_is_a_500_body_and_the_server_keeps_serving(client, caplog):
    with caplog.at_level(logging.ERROR, logger="transformer_mt.serve"):
        response = client.post("/v1/translate", json={"text": ["fine", FAIL]})
    assert response.status_code == 500
    assert "the fake engine broke" in response.json()["error"]["message"]
    assert any(record.exc_info for record in caplog.records)  # the traceback is logged
    assert_served(client)


def test_translations_in_input_order_with_nbest_only_when_asked(client):
    texts = ["a b c d e f", "g", "h i j"]
    plain = client.post("/v1/translate", json={"text": texts}).json()
    assert [t["text"] for t in plain["translations"]] == [fake_translation(t) for t in texts]
    assert all(set(t) == {"text", "score"} for t in plain["translations"])
    assert plain["timing"]["total_ms"] >= plain["timing"]["queue_ms"] >= 0
    nbest = client.post("/v1/translate", json={"text": texts, "beam_size": 3, "n_best": 3})
    for item, text in zip(nbest.json()["translations"], texts, strict=True):
        assert [h["text"] for h in item["nbest"]][0] == item["text"] == fake_translation(text)
        assert len(item["nbest"]) == 3
        scores = [h["score"] for h in item["nbest"]]
        assert scores == sorted(scores, reverse=True) and scores[0] == item["score"]


def test_a_single_string_gets_a_list_of_one_and_a_string_prefix_applies_to_every_text(client):
    single = client.post("/v1/translate", json={"text": "der hund"}).json()
    assert [t["text"] for t in single["translations"]] == [fake_translation("der hund")]
    body = {"text": ["a b", "c d"], "prefix": "so"}
    found = client.post("/v1/translate", json=body).json()["translations"]
    assert [t["text"] for t in found] == [fake_translation(t, "so") for t in body["text"]]
    body["prefix"] = ["one", "two"]
    found = client.post("/v1/translate", json=body).json()["translations"]
    assert [t["text"] for t in found] == [fake_translation("a b", "one"), "two d c"]


def events_of(response) -> list[tuple[str, dict]]:
    events = []
    for block in response.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_a_greedy_stream_sends_the_text_so_far_then_the_result_then_done(client):
    body = {"text": ["eins zwei drei", "vier"], "beam_size": 1}
    response = client.post("/v1/translate/stream", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = events_of(response)
    assert [name for name, _ in events[-2:]] == ["result", "done"]
    tokens = [data for name, data in events if name == "token"]
    assert {name for name, _ in events[:-2]} == {"token"}
    for index, text in enumerate(body["text"]):
        words = fake_translation(text).split()
        growing = [t["text"] for t in tokens if t["index"] == index]
        assert growing == [" ".join(words[: n + 1]) for n in range(len(words))]
    result = events[-2][1]
    expected = client.post("/v1/translate", json=body).json()
    assert result["translations"] == expected["translations"]


def test_a_beam_search_stream_sends_only_the_result(client):
    events = events_of(client.post("/v1/translate/stream", json={"text": "a b", "beam_size": 2}))
    assert [name for name, _ in events] == ["result", "done"]
    assert events[0][1]["translations"][0]["text"] == fake_translation("a b")


def test_a_stream_refuses_like_translate_and_reports_a_fault_as_an_error_event(client):
    refused = client.post("/v1/translate/stream", json={"text": "a", "beam_size": True})
    assert (refused.status_code, refused.json()["error"]["field"]) == (400, "beam_size")
    events = events_of(client.post("/v1/translate/stream", json={"text": FAIL}))
    assert [name for name, _ in events] == ["error", "done"]
    assert events[0][1]["error"]["status"] == 500


def metric_samples(client) -> dict[str, list]:
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/")
    return {f.name: f.samples for f in text_string_to_metric_families(response.text)}


def test_metrics_parse_and_hold_the_engine_and_request_families(client, engine):
    for body in (GOOD, GOOD, {"text": "a", "beam_size": True}):
        client.post("/v1/translate", json=body)
    families = metric_samples(client)
    engine_families = {
        "tmt_queue_sentences",
        "tmt_running_sentences",
        "tmt_running_hypotheses",
        "tmt_kv_blocks_used",
        "tmt_kv_blocks_free",
        "tmt_generated_tokens",
        "tmt_tokens_per_second",
        "tmt_engine_requests_done",
        "tmt_engine_requests_cancelled",
        "tmt_cache_hits",
        "tmt_cache_misses",
        "tmt_cache_entries",
    }
    assert engine_families | {"tmt_http_request_seconds", "tmt_http_requests"} <= set(families)

    def value(name, **labels):
        (sample,) = [s for s in families[name] if labels.items() <= s.labels.items()]
        return sample.value

    stats = engine.stats()
    assert value("tmt_generated_tokens") == stats.generated_tokens > 0
    assert value("tmt_kv_blocks_free") == stats.kv_blocks_total - stats.kv_blocks_used
    assert value("tmt_cache_hits", cache="translation") == len(GOOD["text"])  # the repeat
    assert value("tmt_cache_entries", cache="translation") == len(GOOD["text"])
    assert value("tmt_http_requests", path="/v1/translate", status="200") == 2
    assert value("tmt_http_requests", path="/v1/translate", status="400") == 1
    count = [s for s in families["tmt_http_request_seconds"] if s.name.endswith("_count")]
    assert {s.labels["path"]: s.value for s in count}["/v1/translate"] == 3


def test_each_app_has_its_own_registry(engine):
    first, second = (TestClient(create_app(engine), base_url=BASE_URL) for _ in range(2))
    first.post("/v1/translate", json=GOOD)
    assert "tmt_http_requests_total" in first.get("/metrics").text
    assert "tmt_http_requests_total{" not in second.get("/metrics").text


def test_one_log_line_per_request(client, caplog):
    with caplog.at_level(logging.INFO, logger="transformer_mt.serve"):
        client.post("/v1/translate", json=GOOD)
        client.get("/health")
    lines = [r.getMessage() for r in caplog.records if r.name == "transformer_mt.serve"]
    assert len(lines) == 2
    method, path, status, ms, unit, sentences, _ = lines[0].split()
    assert (method, path, status, unit, sentences) == ("POST", "/v1/translate", "200", "ms", "2")
    assert float(ms) >= 0
    assert lines[1].startswith("GET /health 200 ")


def test_health_and_unknown_paths(client):
    assert client.get("/health").json() == {"status": "ok"}
    missing = client.get("/v2/nothing")
    assert missing.status_code == 404 and missing.json()["error"]["status"] == 404
    wrong = client.get("/v1/translate")
    assert wrong.status_code == 405 and wrong.json()["error"]["status"] == 405


def test_the_page_has_its_controls_and_no_outside_urls(client):
    response = client.get("/")
    assert response.headers["content-type"].startswith("text/html")
    for element in ("source", "translate", "result"):
        assert f'id="{element}"' in response.text
    assert "http://" not in response.text and "https://" not in response.text
    assert "metrics" in response.text and "v1/translate" in response.text


@pytest.mark.parametrize("beam_size", [1, 4])
def test_the_page_starts_with_the_checkpoints_beam_size(beam_size):
    """As `tmt translate` and the API, which take the checkpoint's decode settings."""
    engine = FakeEngine(defaults=DecodeConfig(beam_size=beam_size, n_best=1))
    page = TestClient(create_app(engine), base_url=BASE_URL).get("/").text
    (field,) = re.findall(r'<input id="beam"[^>]*>', page)
    assert f'value="{beam_size}"' in field and "{{" not in page


def test_the_api_page_loads_everything_from_this_server(client):
    """Served offline: no CDN script, style or icon; every address the page names (its
    assets, the schema) answers here. No ReDoc page: it loads its maker's logo from the
    internet."""
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "http://" not in page.text and "https://" not in page.text and "//cdn" not in page.text
    local = set(re.findall(r"""(?:src|href|url:)\s*=?\s*["'](/[^"']*)["']""", page.text))
    assert "/openapi.json" in local and any(name.endswith(".js") for name in local)
    for address in local:
        assert client.get(address).status_code == 200, address
    assert client.get("/redoc").status_code == 404


def test_every_reference_of_the_openapi_document_resolves(client):
    """Request bodies nest models (a glossary's entries): each reference names a schema of
    the document itself."""
    text = client.get("/openapi.json").text
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    references = re.findall(r'"\$ref":\s*"([^"]+)"', text)
    assert references and "$defs" not in text
    for reference in references:
        assert reference.removeprefix("#/components/schemas/") in schemas, reference


def test_a_prefix_count_refused_by_the_engine_names_the_prefix_field():
    refusal = api.engine_error(TextsCountError("prefixes", 1, 2), [])
    assert (refusal.status, refusal.field) == (400, "prefix")
    assert "1 prefixes for 2 texts" in refusal.message


def test_the_body_takes_decode_settings_with_the_decode_configs_types():
    hints = typing.get_type_hints(DecodeConfig)
    described = typing.get_type_hints(schema.TranslateBody)
    for name, kind in api.DECODE_FIELDS.items():
        assert kind is hints[name], name
        assert described[name] == kind | None, name


def test_openapi_describes_the_body_api_accepts(client):
    spec = client.get("/openapi.json").json()
    for path in ("/v1/translate", "/v1/translate/stream"):
        body = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert set(body["schema"]["properties"]) == set(api.KEYS)
    assert set(schema.TranslateBody.model_fields) == set(api.KEYS)
    assert client.get("/docs").status_code == 200
