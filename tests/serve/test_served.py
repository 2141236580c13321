"""The real engine behind the real server on a loopback port: what 32 concurrent clients get
is byte for byte what `tmt translate` prints for the same inputs and options; bad requests get
their status and the next good one is served."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from tests.conftest import WORDS  # noqa: E402
from tests.serve.real_engine import post, serving  # noqa: E402
from transformer_mt.cli import main  # noqa: E402
from transformer_mt.serve.engine import ServeLimits  # noqa: E402

# (beam size, n-best, with prefixes)
OPTIONS = [(1, 1, False), (5, 1, False), (5, 3, False), (5, 1, True), (1, 1, True)]


@pytest.fixture(scope="module")
def served(checkpoint):
    yield from serving(checkpoint, ServeLimits(kv_blocks=2000))


def texts_and_prefixes(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    texts = [" ".join(rng.choices(WORDS, k=rng.choice([1, 3, 8, 20]))) for _ in range(n)]
    return texts, [" ".join(rng.choices(WORDS, k=rng.randint(0, 3))) for _ in range(n)]


def offline(checkpoint, tmp_path, texts, prefixes, beam, n_best) -> list[list[str]]:
    """`tmt translate` of `texts`: the n-best texts of every line."""
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(texts) + "\n")
    args = ["translate", "--checkpoint", str(checkpoint), "--input", str(source)]
    args += ["--output", str(out), "--beam-size", str(beam), "--nbest", str(n_best)]
    if prefixes is not None:
        (tmp_path / "prefixes.txt").write_text("\n".join(prefixes) + "\n")
        args += ["--prefix", str(tmp_path / "prefixes.txt")]
    assert main(args) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    if n_best == 1:
        return [[line] for line in lines]
    return [
        [line.split(" ||| ")[1] for line in lines[i : i + n_best]]
        for i in range(0, len(lines), n_best)
    ]


@pytest.mark.parametrize("beam, n_best, with_prefix", OPTIONS)
def test_32_concurrent_clients_get_what_tmt_translate_prints(
    checkpoint, served, tmp_path, beam, n_best, with_prefix
):
    url, engine = served
    texts, prefixes = texts_and_prefixes(64, seed=beam * 10 + n_best + with_prefix)
    if not with_prefix:
        prefixes = None
    expected = offline(checkpoint, tmp_path, texts, prefixes, beam, n_best)

    def client(i: int) -> list[list[str]]:
        # Each client sends its two sentences one request each, so that requests interleave.
        got = []
        for j in (i, i + 32):
            body = {"text": texts[j], "beam_size": beam, "n_best": n_best}
            if prefixes is not None:
                body["prefix"] = prefixes[j]
            status, answer = post(f"{url}/v1/translate", json.dumps(body).encode())
            assert status == 200, answer
            (item,) = answer["translations"]
            got.append([h["text"] for h in item["nbest"]] if n_best > 1 else [item["text"]])
        return got

    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(client, range(32)))
    served_texts = [answers[i % 32][i // 32] for i in range(64)]
    assert served_texts == expected
    if prefixes is not None:
        for (best, *_), prefix in zip(served_texts, prefixes, strict=True):
            assert best.startswith(prefix)


@pytest.mark.parametrize(
    "body, status, field",
    [
        (b"not json", 400, "body"),
        (b'{"txt": "hunde"}', 400, "txt"),
        (b'{"text": "hunde", "beam": 2}', 400, "beam"),
        (b'{"text": "hunde", "beam_size": 0}', 400, "beam_size"),
        (b'{"text": "hunde", "beam_size": 1000}', 400, "beam_size"),
        (b'{"text": "hunde", "n_best": 3, "beam_size": 2}', 400, "n_best"),
        (b'{"text": "\xff hunde"}', 400, "body"),
        (b'{"text": ["a", "b"], "prefix": ["a"]}', 400, "prefix"),
        (json.dumps({"text": ["hunde"] * 300}).encode(), 413, "text"),
    ],
)
def test_bad_requests_get_their_status_and_the_server_keeps_serving(served, body, status, field):
    url, _ = served
    got, answer = post(f"{url}/v1/translate", body)
    assert (got, answer["error"]["field"]) == (status, field), answer
    ok, answer = post(f"{url}/v1/translate", b'{"text": "ein hund"}')
    assert ok == 200 and len(answer["translations"]) == 1


def stream(url: str, body: dict) -> list[tuple[str, dict]]:
    request = urllib.request.Request(
        f"{url}/v1/translate/stream",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        text = response.read().decode()
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


@pytest.mark.parametrize("beam", [1, 5])
def test_the_stream_sends_greedy_text_as_decided_and_the_result_of_either(served, beam):
    url, _ = served
    body = {"text": ["hunde spielen im schnee", "ein mann liest das buch"], "beam_size": beam}
    events = stream(url, body)
    assert [name for name, _ in events[-2:]] == ["result", "done"]
    _, answer = post(f"{url}/v1/translate", json.dumps(body).encode())
    assert events[-2][1]["translations"] == answer["translations"]
    tokens = [data for name, data in events if name == "token"]
    if beam > 1:
        assert not tokens
        return
    for index, item in enumerate(answer["translations"]):
        growing = [t["text"] for t in tokens if t["index"] == index]
        # Text so far, growing; the last token comes with the result.
        assert len(growing) > 1 and len(set(growing)) == len(growing)
        assert all(item["text"].startswith(part.rstrip()) for part in growing)


def test_metrics_after_the_traffic_show_an_idle_engine(served):
    url, engine = served
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert values["tmt_running_sentences"] == 0 and values["tmt_queue_sentences"] == 0
    assert values["tmt_kv_blocks_used"] == engine.prefixes.blocks_held
    assert values["tmt_generated_tokens_total"] > 0
