"""The dropped-content check over HTTP: `"report": true` adds each text's `checks`, default
responses stay as they were, a bad `report` is a 400 naming it; with the real engine, what
`translate_checked` (`tmt translate --report`) gives."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from tests.serve.fakes import DROP, fake_translation  # noqa: E402
from tests.serve.real_engine import running  # noqa: E402
from transformer_mt.inference.checked import translate_checked  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.serve.engine import ServeLimits  # noqa: E402
from transformer_mt.serve.http.app import create_app  # noqa: E402

BASE_URL = "http://127.0.0.1:8000"


@pytest.fixture
def client(engine):
    return TestClient(create_app(engine), base_url=BASE_URL, raise_server_exceptions=False)


def test_without_report_a_response_has_no_checks(client):
    for body in ({"text": ["ein hund", DROP]}, {"text": "ein hund", "report": False}):
        response = client.post("/v1/translate", json=body)
        assert response.status_code == 200
        assert all("checks" not in item for item in response.json()["translations"])


def test_with_report_each_text_has_its_checks(client):
    texts = ["ein hund", f"zwei {DROP} katzen", " "]
    plain = client.post("/v1/translate", json={"text": texts}).json()["translations"]
    response = client.post("/v1/translate", json={"text": texts, "report": True})
    assert response.status_code == 200, response.text
    checked = response.json()["translations"]
    assert [item["text"] for item in checked] == [item["text"] for item in plain]
    quiet, dropped, blank = checked
    assert quiet["checks"] == [
        {
            "source": "ein hund",
            "flags": [],
            "scores": {"coverage": 1.0, "length_ratio": 1.0, "source_chrf": 0.0},
            "retried": False,
            "cleared": None,
        }
    ]
    assert [check["flags"] for check in dropped["checks"]] == [["coverage"]]
    assert blank["checks"] == []


def test_a_stream_with_report_has_the_checks_in_its_result(client):
    body = {"text": [f"{DROP} hund"], "beam_size": 1, "report": True}
    response = client.post("/v1/translate/stream", json=body)
    blocks = [block.split("\n") for block in response.text.strip().split("\n\n")]
    events = {lines[0].removeprefix("event: "): lines[1] for lines in blocks}
    (item,) = json.loads(events["result"].removeprefix("data: "))["translations"]
    assert item["text"] == fake_translation(body["text"][0])
    assert item["checks"][0]["flags"] == ["coverage"]


@pytest.mark.parametrize(
    "body, message",
    [
        ({"text": "a", "report": "yes"}, "report: expected true or false, got a string"),
        ({"text": "a", "report": 1}, "report: expected true or false, got a number (1)"),
        ({"text": "<p>a</p>", "report": True, "format": "html"}, "for format text only"),
    ],
)
def test_a_report_the_request_cannot_have_is_a_400_naming_it(client, engine, body, message):
    response = client.post("/v1/translate", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == "report" and message in error["message"]
    assert client.post("/v1/translate", json={"text": "a", "report": True}).status_code == 200


@pytest.fixture(scope="module")
def real_engine(checkpoint):
    yield from running(checkpoint, ServeLimits(kv_blocks=512))


# A text of two sentences, one of two lines, a blank one; the untrained tiny model's
# translations raise flags.
TEXTS = ["Ein mann fährt rad. Zwei hunde spielen im schnee.", "das buch", "", "buch"]


def test_the_engine_checks_as_tmt_translate_report_does(real_engine, checkpoint):
    expected = translate_checked(Translator.from_checkpoint(str(checkpoint)), TEXTS)
    assert any(s.flags for line in expected for s in line.sentences)
    assert not any(s.retried for line in expected for s in line.sentences)  # split already
    job = real_engine.submit(TEXTS, real_engine.defaults)
    job.future.result(timeout=60)
    checked = real_engine.check(job)
    # the texts and the reports; search scores differ in the last float digits (batching)
    assert [line.translation.texts for line in checked] == [
        line.translation.texts for line in expected
    ]
    assert [line.sentences for line in checked] == [line.sentences for line in expected]


def test_a_served_report_is_the_engine_check(real_engine, checkpoint):
    client = TestClient(create_app(real_engine), base_url=BASE_URL)
    response = client.post("/v1/translate", json={"text": TEXTS, "report": True})
    assert response.status_code == 200, response.text
    # a text with a prefix is searched whole, and checked whole
    prefixed = client.post("/v1/translate", json={"text": TEXTS[0], "prefix": "a", "report": True})
    assert [c["source"] for c in prefixed.json()["translations"][0]["checks"]] == [TEXTS[0]]
    assert response.status_code == 200, response.text
    expected = translate_checked(Translator.from_checkpoint(str(checkpoint)), TEXTS)
    for item, line in zip(response.json()["translations"], expected, strict=True):
        assert item["text"] == line.translation.texts[0]
        assert item["checks"] == [s.to_json() for s in line.sentences]
