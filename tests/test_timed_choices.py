"""Kernel choices made by timing are made once per machine and reused, so a translation does
not depend on what else the machine was doing when its model was loaded."""

from __future__ import annotations

import json
import logging

import pytest

from transformer_mt import timed_choices
from transformer_mt.inference import packed, quantize
from transformer_mt.inference.packed import PackedLinear, packing_available
from transformer_mt.inference.quantize import Int8Linear, int8_engines
from transformer_mt.inference.translator import Translator
from transformer_mt.timed_choices import TimedChoices, machine_fingerprint

from .conftest import WORDS

MACHINE = {"cpu": "test"}
ALLOWED = ("a", "b")


def _counting(answer: str, calls: list[str]):
    def measure() -> str:
        calls.append(answer)
        return answer

    return measure


def test_a_question_is_timed_once_and_its_answer_read_back_by_a_later_process(tmp_path):
    path, calls = tmp_path / "choices.json", []
    assert TimedChoices(path, MACHINE).choose("q", _counting("a", calls), ALLOWED) == "a"
    later = TimedChoices(path, MACHINE)  # as a new process reads the file
    assert later.choose("q", _counting("b", calls), ALLOWED) == "a"
    assert later.choose("r", _counting("b", calls), ALLOWED) == "b"
    assert calls == ["a", "b"]
    kept = json.loads(path.read_text())
    assert kept["machine"] == MACHINE and kept["answers"] == {"q": "a", "r": "b"}


@pytest.mark.parametrize(
    "content",
    ["{not json", "[1, 2]", '{"format": 1, "machine": {"cpu": "test"}, "answers": [1]}', ""],
)
def test_a_damaged_file_is_timed_again_with_a_warning_and_rewritten(tmp_path, content, caplog):
    path = tmp_path / "choices.json"
    path.write_text(content)
    with caplog.at_level(logging.WARNING):
        assert TimedChoices(path, MACHINE).choose("q", lambda: "b", ALLOWED) == "b"
    assert str(path) in caplog.text
    assert json.loads(path.read_text())["answers"] == {"q": "b"}


def test_answers_of_another_machine_or_not_allowed_are_timed_again(tmp_path):
    path = tmp_path / "choices.json"
    TimedChoices(path, MACHINE).choose("q", lambda: "a", ALLOWED)
    assert TimedChoices(path, {"cpu": "other"}).choose("q", lambda: "b", ALLOWED) == "b"
    assert TimedChoices(path, {"cpu": "other"}).choose("q", lambda: "a", ("b", "c")) == "b"
    assert TimedChoices(path, {"cpu": "other"}).choose("q", lambda: "c", ("c",)) == "c"


def test_a_folder_that_cannot_be_written_keeps_the_answers_in_the_process(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    choices = TimedChoices(blocker / "choices.json", MACHINE)  # a folder under a file
    with caplog.at_level(logging.WARNING):
        assert choices.choose("q", lambda: "a", ALLOWED) == "a"
    assert "cannot be kept" in caplog.text and "TMT_CACHE_DIR" in caplog.text
    assert choices.choose("q", lambda: "b", ALLOWED) == "a"


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TMT_CACHE_DIR", str(tmp_path / "mine"))
    assert timed_choices.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("TMT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert timed_choices.cache_dir() == tmp_path / "xdg" / "transformer_mt"
    fingerprint = machine_fingerprint()
    assert fingerprint["torch"] and fingerprint["capability"] and fingerprint["cpu"]


# 150 lines of the tiny model's words, of 1 to 9 words each.
LINES = [
    " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(1 + i % 9)) for i in range(150)
]


def _translate(checkpoint, choices: TimedChoices, monkeypatch, quantize_to=None):
    """The 150 lines translated by a model loaded with `choices`, and the kernels it runs."""
    monkeypatch.setattr(timed_choices, "machine_choices", lambda: choices)
    translator = Translator.from_checkpoint(str(checkpoint), quantize=quantize_to, beam_size=3)
    kernels = sorted(
        (type(m).__name__, getattr(m, "engine", ""), m.in_features, m.out_features)
        for m in translator.model.modules()
        if isinstance(m, PackedLinear | Int8Linear)
    )
    return translator.translate(LINES), kernels


def _float32_timing_reversed(monkeypatch, choices: TimedChoices) -> None:
    """Time packing as a busy machine might: every kind the other way from `choices`."""

    def reversed_speedup(layer, relu=False):
        kept = choices.answers[f"float32 linear {packed.kind_label(_kind(layer, relu))}"]
        return 0.5 if kept == "packed" else 2.0

    monkeypatch.setattr(packed, "packing_pays", reversed_speedup)


def _int8_timing_reversed(monkeypatch, choices: TimedChoices) -> None:
    """Time the int8 engines as a busy machine might: every kind the other way."""

    def other_engine(layer):
        kept = choices.answers[quantize.engine_choice(quantize._kind(layer))]
        return next(engine for engine in int8_engines() if engine != kept)

    monkeypatch.setattr(quantize, "fastest_engine", other_engine)


def _kind(layer, relu):
    return layer.in_features, layer.out_features, relu


@pytest.mark.parametrize("quantize_to", [None, "int8"])
def test_the_same_lines_translate_byte_for_byte_when_a_later_timing_says_otherwise(
    checkpoint, tmp_path, monkeypatch, quantize_to
):
    if quantize_to is None and not packing_available():
        pytest.skip("torch built without oneDNN: nothing is timed in float32")
    if quantize_to == "int8" and len(int8_engines()) < 2:
        pytest.skip("one int8 engine only: nothing is timed")
    path = tmp_path / "choices.json"
    first = TimedChoices(path, MACHINE)
    expected, kernels = _translate(checkpoint, first, monkeypatch, quantize_to)
    reverse = _float32_timing_reversed if quantize_to is None else _int8_timing_reversed
    reverse(monkeypatch, first)
    # Unkept, the reversed timing changes the kernels: the comparison below can fail.
    _, others = _translate(checkpoint, TimedChoices(None, MACHINE), monkeypatch, quantize_to)
    assert others != kernels
    # Kept, a later load (another process) runs the kernels of the first and translates alike.
    again, kernels_again = _translate(
        checkpoint, TimedChoices(path, MACHINE), monkeypatch, quantize_to
    )
    assert kernels_again == kernels
    assert [t.texts for t in again] == [t.texts for t in expected]
    assert [t.scores for t in again] == [t.scores for t in expected]
