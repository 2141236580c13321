"""The translate body takes every DecodeConfig field the server searches with, typed as the
dataclass types it; the rest are refused with the reason; the real server translates with
them as `tmt translate` does with the same flags."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.serve.fakes import FakeEngine  # noqa: E402
from tests.serve.real_engine import post, serving  # noqa: E402
from transformer_mt.cli import main  # noqa: E402
from transformer_mt.config import DecodeConfig  # noqa: E402
from transformer_mt.serve.engine import ServeLimits  # noqa: E402
from transformer_mt.serve.http import api  # noqa: E402
from transformer_mt.serve.http.body import ApiError  # noqa: E402

TEXTS = ["ein mann liest das buch", "hunde spielen"]


def parse(body: dict) -> api.TranslateRequest:
    engine = FakeEngine()
    data = json.dumps(body).encode()
    return api.parse_request(data, DecodeConfig(), engine.limits, engine.languages)


def test_every_decode_field_is_a_body_key_or_refused_with_a_reason():
    for field in dataclasses.fields(DecodeConfig):
        assert (field.name in api.DECODE_FIELDS) != (field.name in api.UNSERVED_DECODE), field.name
    assert {"min_len", "length_norm", "sampling", "early_stopping"} <= set(api.DECODE_FIELDS)


def test_min_len_and_length_norm_set_the_requests_decode_settings():
    parsed = parse({"text": "a", "min_len": 3, "length_norm": "average"})
    assert parsed.decode == DecodeConfig(min_len=3, length_norm="average")
    assert parsed.decode_keys == ("length_norm", "min_len")
    parsed = parse({"text": "a", "early_stopping": "never", "length_norm": "power"})
    assert parsed.decode == DecodeConfig(early_stopping="never", length_norm="power")


@pytest.mark.parametrize(
    "body, field, words",
    [
        ({"length_norm": "gnm"}, "length_norm", ["one of gnmt, average, none", "'gnm'"]),
        ({"length_norm": 1}, "length_norm", ["a number"]),
        ({"min_len": 1.5}, "min_len", ["an integer"]),
        ({"early_stopping": True}, "early_stopping", ["k_finished", "heuristic", "never"]),
        ({"min_len": -1}, "min_len", ["min_len=-1"]),
        ({"sampling": "yes"}, "sampling", ["true or false", "a string"]),
        ({"top_k": 5}, "top_k", ["sampling setting", "searches"]),
        ({"temperature": 0.5}, "temperature", ["sampling setting"]),
        ({"max_tokens": 100}, "max_tokens", ["--max-batch-tokens"]),
        (
            {"length_norm": "none", "length_penalty": 3},
            "length_penalty",
            ["length_penalty=3 changes nothing where length_norm none"],
        ),
        (
            {"disable_unk": True, "replace_unk": True},
            "replace_unk",
            ["no unknown piece is produced"],
        ),
    ],
)
def test_a_bad_decode_value_or_an_unserved_field_is_refused_naming_it(body, field, words):
    with pytest.raises(ApiError) as refused:
        parse({"text": "a", **body})
    assert (refused.value.status, refused.value.field) == (400, field)
    assert "\n" not in refused.value.message
    for word in words:
        assert word in refused.value.message


@pytest.fixture(scope="module")
def served(checkpoint):
    yield from serving(checkpoint, ServeLimits(kv_blocks=500))


def test_the_server_translates_with_min_len_and_length_norm_as_tmt_translate(
    checkpoint, served, tmp_path
):
    url, _ = served
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    command = ["translate", "--checkpoint", str(checkpoint), "--input", str(source)]
    flags = ["--min-len", "6", "--length-norm", "none", "--beam-size", "3"]
    flags += ["--early-stopping", "heuristic"]
    assert main([*command, "--output", str(out), *flags]) == 0
    body = {"text": TEXTS, "min_len": 6, "length_norm": "none", "beam_size": 3}
    body["early_stopping"] = "heuristic"
    status, answer = post(f"{url}/v1/translate", body)
    assert status == 200, answer
    served_texts = [t["text"] for t in answer["translations"]]
    assert served_texts == out.read_text(encoding="utf-8").splitlines()


def test_the_server_refuses_sampling_in_one_line_and_keeps_serving(served):
    url, _ = served
    for search in ({}, {"beam_size": 6}, {"early_stopping": "never"}):  # not blamed
        body = {"text": "hunde", "sampling": True, **search}
        status, answer = post(f"{url}/v1/translate", body)
        assert (status, answer["error"]["field"]) == (400, "sampling"), answer
        assert answer["error"]["message"].startswith("sampling=true: the server searches")
    status, _ = post(f"{url}/v1/translate", {"text": "hunde", "sampling": False})
    assert status == 200
