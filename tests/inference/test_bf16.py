"""`--quantize bf16`: bfloat16 linear layers against float32 ones computed from the same
bfloat16-rounded numbers, inside a Translator, and refused where the CPU emulates bfloat16."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.errors import SettingError
from transformer_mt.inference import quantize
from transformer_mt.inference.packed import PackedLinear
from transformer_mt.inference.quantize import bf16_refusal
from transformer_mt.inference.running import inference_model
from transformer_mt.inference.translator import Translator
from transformer_mt.machine import Choice

from ..conftest import teacher_forced_log_probs

native = pytest.mark.skipif(
    bf16_refusal() is not None, reason=f"bfloat16 products: {bf16_refusal()}"
)


def rounded(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).float()


@native
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("rows", [1, 7, 64, 131])
def test_a_bf16_layer_is_the_product_of_the_rounded_numbers(relu, rows):
    """The slow twin: float32 arithmetic on the bfloat16-rounded input, weight and bias,
    rounded to bfloat16 at the end as the product's output is."""
    torch.manual_seed(0)
    linear = nn.Linear(64, 48)
    x = torch.randn(rows, 64)
    layer = PackedLinear(linear, relu=relu, dtype=torch.bfloat16)
    with torch.inference_mode():
        out = layer(x)
        exact = rounded(x) @ rounded(linear.weight).T + rounded(linear.bias)
        expected = torch.relu(exact) if relu else exact
    assert out.dtype == torch.float32 and out.shape == (rows, 48)
    # One bfloat16 rounding of the output: a relative error of at most 2^-8.
    torch.testing.assert_close(out, expected, rtol=2**-7, atol=1e-3)


@native
def test_a_bf16_translator_scores_close_to_float32_and_is_deterministic(checkpoint):
    float32 = Translator.from_checkpoint(str(checkpoint), beam_size=2)
    bf16 = Translator.from_checkpoint(str(checkpoint), quantize="bf16", beam_size=2)
    layers = [m for m in bf16.model.modules() if isinstance(m, PackedLinear)]
    assert layers and all(m.dtype == torch.bfloat16 for m in layers)
    assert isinstance(bf16.model.output_projection, PackedLinear)
    assert bf16.model.decoder.embed.token_embedding.weight.dtype == torch.float32
    expected = teacher_forced_log_probs(float32.model)
    torch.testing.assert_close(teacher_forced_log_probs(bf16.model), expected, atol=0.05, rtol=0)
    lines = ["ein mann fährt rad", "das buch"]
    first = [t.texts for t in bf16.translate(lines)]
    again = Translator.from_checkpoint(str(checkpoint), quantize="bf16", beam_size=2)
    assert [t.texts for t in again.translate(lines)] == first


@native
def test_tmt_serve_in_bf16_translates_as_the_bf16_translator_does(checkpoint):
    """One request at a time, so that each batch holds the rows the translator's does."""
    from transformer_mt.serve.engine import Engine, ServeLimits

    limits = ServeLimits(kv_blocks=256, block_size=4)
    engine = Engine.from_checkpoint(str(checkpoint), limits=limits, quantize="bf16")
    offline = Translator.from_checkpoint(str(checkpoint), quantize="bf16")
    engine.start()
    try:
        for text in ["ein mann fährt rad", "das buch", "der hund sieht die katze"]:
            (served,) = engine.submit([text], engine.defaults).future.result(timeout=60)
            (expected,) = offline.translate([text])
            assert served.texts == expected.texts
            assert served.scores == pytest.approx(expected.scores, abs=1e-4)
    finally:
        engine.stop()


def test_bf16_is_refused_where_the_cpu_emulates_it(checkpoint, monkeypatch, capsys, tmp_path):
    """Emulated, each product runs many times slower than float32."""
    emulated = Choice(False, "CPU capability AVX2 has no native bf16")
    monkeypatch.setattr(quantize, "native_bf16", lambda: emulated)
    with pytest.raises(SettingError, match="no native bfloat16 .CPU capability AVX2"):
        Translator.from_checkpoint(str(checkpoint), quantize="bf16")
    source = tmp_path / "in.txt"
    source.write_text("das buch\n", encoding="utf-8")
    args = ["--checkpoint", str(checkpoint), "--input", str(source), "--quantize", "bf16"]
    assert main(["translate", *args]) == 2
    assert capsys.readouterr().err == (
        "error: --quantize bf16: this CPU has no native bfloat16 (CPU capability AVX2 has no "
        "native bf16), so it would run slower\n"
    )


def test_bf16_runs_on_the_cpu_only(checkpoint):
    model = load_for_inference(str(checkpoint)).model
    with pytest.raises(SettingError, match="bf16 layers run on the CPU only"):
        inference_model(model, "bf16", torch.device("cuda"))
