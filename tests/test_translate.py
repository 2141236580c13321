"""`tmt translate`: line count kept, order restored, batch == single, one-line errors."""

import subprocess
import sys

import pytest
import torch

from transformer_mt import translate
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID
from transformer_mt.errors import TmtError
from transformer_mt.machine import Choice
from transformer_mt.translate import Translator

from .conftest import WORDS


def run_cli(*args, stdin: bytes = b""):
    return subprocess.run(
        [sys.executable, "-m", "transformer_mt", "translate", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def test_line_count_kept_with_empty_long_and_unicode_lines(checkpoint, tmp_path):
    lines = [
        "ein mann fährt rad",
        "",
        "   ",
        " ".join(WORDS * 10),  # far beyond max_positions=64
        "zwei hunde 🐕🐕 spielen — «im» schnee ß Ω 漢字",
        "",
    ]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    result = run_cli("--checkpoint", str(checkpoint), "--input", str(source), "--output", str(out))
    assert result.returncode == 0, result.stderr.decode()
    produced = out.read_text(encoding="utf-8").split("\n")
    assert produced[-1] == "" and len(produced) - 1 == len(lines)
    assert produced[1] == produced[2] == produced[5] == ""
    assert b"1 line(s) longer" in result.stderr


def test_stdin_to_stdout_and_nbest(checkpoint):
    result = run_cli(
        "--checkpoint", str(checkpoint), "--nbest", "2", stdin=b"ein mann\n\ndas buch\n"
    )
    assert result.returncode == 0, result.stderr.decode()
    rows = result.stdout.decode().splitlines()
    # Two hypotheses per sentence; an empty line has one, the empty translation.
    assert [r.split(" ||| ")[0] for r in rows] == ["0", "0", "1", "2", "2"]
    assert rows[2] == "1 |||  ||| 0.0000"


def test_batch_equals_each_sentence_alone(checkpoint):
    translator = Translator.from_checkpoint(str(checkpoint), beam_size=3)
    lines = ["ein mann fährt rad", "das buch", "", "zwei hunde spielen im schnee eine frau"]
    together = [t.texts for t in translator.translate(lines)]
    alone = [translator.translate([line])[0].texts for line in lines]
    assert together == alone


@pytest.mark.parametrize(
    "stdin,args,message",
    [
        (b"ok\n\xff\xfe\n", [], "<stdin>:2: invalid UTF-8"),
        (b"", ["--input", "/no/such/file"], "/no/such/file"),
        (b"", ["--beam-size", "0"], "decode.beam_size=0 must be > 0"),
    ],
)
def test_bad_input_gives_one_line_error(checkpoint, stdin, args, message):
    result = run_cli("--checkpoint", str(checkpoint), *args, stdin=stdin)
    stderr = result.stderr.decode().strip()
    assert result.returncode == 2
    assert message in stderr and "Traceback" not in stderr and len(stderr.splitlines()) == 1


def test_missing_checkpoint_is_one_line(tmp_path):
    result = run_cli("--checkpoint", str(tmp_path / "none.pt"))
    assert result.returncode == 2 and b"checkpoint not found" in result.stderr


def test_int8_keeps_line_count(checkpoint, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("ein mann fährt rad\n\ndas buch\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    result = run_cli(
        "--checkpoint", str(checkpoint), "--input", str(source), "--output", str(out),
        "--quantize", "int8",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert out.read_text(encoding="utf-8").count("\n") == 3
    assert b"Warning" not in result.stderr


def test_int8_leaves_the_quantized_engine_setting_alone(checkpoint):
    before = torch.backends.quantized.engine
    Translator.from_checkpoint(str(checkpoint), quantize="int8")
    assert torch.backends.quantized.engine == before


def test_int8_log_probs_close_to_float32_and_float32_unchanged(checkpoint):
    float32 = Translator.from_checkpoint(str(checkpoint), beam_size=2)
    default = Translator.from_checkpoint(str(checkpoint), quantize=None, beam_size=2)
    int8 = Translator.from_checkpoint(str(checkpoint), quantize="int8", beam_size=2)
    assert not any("quantized" in type(m).__module__ for m in float32.bundle.model.modules())
    assert isinstance(int8.bundle.model.output_projection, torch.ao.nn.quantized.dynamic.Linear)
    lines = ["ein mann fährt rad", "das buch"]
    assert [t.texts for t in default.translate(lines)] == [
        t.texts for t in float32.translate(lines)
    ]
    src_ids = torch.tensor([[5, 9, 12, EOS_ID], [7, 8, EOS_ID, 0]])
    tgt_ids = torch.tensor([[BOS_ID, 5, 9, 12, 20], [BOS_ID, 7, 8, 30, 4]])
    with torch.no_grad():
        expected = torch.log_softmax(float32.bundle.model(src_ids, tgt_ids), -1)
        actual = torch.log_softmax(int8.bundle.model(src_ids, tgt_ids), -1)
    # Loose: int8 weights and activations move each logit by a few hundredths on this model.
    torch.testing.assert_close(actual, expected, atol=0.1, rtol=0.0)


@pytest.mark.parametrize("bf16", [True, False])
def test_int8_stores_the_cache_in_bfloat16_where_the_cpu_computes_it(checkpoint, monkeypatch, bf16):
    monkeypatch.setattr(translate, "native_bf16", lambda: Choice(bf16, "pretended"))
    int8 = Translator.from_checkpoint(str(checkpoint), quantize="int8", beam_size=2)
    assert int8.bundle.model.cache_dtype == (torch.bfloat16 if bf16 else None)
    assert int8.translate(["ein mann fährt rad"])[0].texts  # decodes through that cache
    float32 = Translator.from_checkpoint(str(checkpoint), beam_size=2)
    assert float32.bundle.model.cache_dtype is None


def test_unknown_quantization_is_refused(checkpoint):
    with pytest.raises(TmtError, match="choose one of int8"):
        Translator.from_checkpoint(str(checkpoint), device="cpu", quantize="int4")
