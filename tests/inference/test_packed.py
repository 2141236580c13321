"""oneDNN-packed linear layers against `nn.Linear`, alone and inside a Translator."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_mt.artifacts import load_for_inference
from transformer_mt.inference import packed
from transformer_mt.inference.packed import (
    PACKING_SPEEDUP,
    PackedLinear,
    bucketed_rows,
    pack_linears,
    pack_where_it_pays,
    packed_product,
    packing_available,
    packing_pays,
)
from transformer_mt.inference.translator import Translator
from transformer_mt.model.layers import FeedForward
from transformer_mt.timed_choices import TimedChoices

pytestmark = pytest.mark.skipif(not packing_available(), reason="torch built without oneDNN")


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 32), (3, 5, 32), (1, 1, 32)])
def test_packed_linear_equals_nn_linear(bias, shape):
    torch.manual_seed(0)
    linear = nn.Linear(32, 48, bias=bias)
    x = torch.randn(*shape)
    with torch.inference_mode():
        torch.testing.assert_close(PackedLinear(linear)(x), linear(x), atol=1e-5, rtol=1e-5)


def test_row_counts_fall_into_few_buckets_with_little_padding():
    buckets = [bucketed_rows(rows) for rows in range(1, 5001)]
    assert buckets[:9] == [8] * 8 + [16] and bucketed_rows(320) == 320
    assert all(b >= r and b % 8 == 0 for r, b in enumerate(buckets, start=1))
    assert all((b - r) / r < 0.125 for r, b in enumerate(buckets, start=1) if r > 64)
    assert len(set(buckets[:400])) == 29 and len(set(buckets)) <= 80


@pytest.mark.parametrize("relu", [False, True])
def test_every_row_count_gives_the_rows_of_nn_linear(relu):
    """Padded to its bucket inside, the product returns exactly the rows asked for."""
    torch.manual_seed(0)
    linear = nn.Linear(32, 48)
    layer = PackedLinear(linear, relu=relu)
    with torch.inference_mode():
        for rows in range(1, 140):
            x = torch.randn(rows, 32)
            expected = torch.relu(linear(x)) if relu else linear(x)
            torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_packed_product_of_any_width_gives_the_columns_of_f_linear(bias):
    """A shortlist's rows, padded to a bucketed width inside, give exactly the columns asked
    for, at every row count of the input."""
    torch.manual_seed(0)
    for width in (1, 7, 65, 130, 300):
        rows, b = torch.randn(width, 32), torch.randn(width) if bias else None
        project = packed_product(rows, b)
        for n in (1, 9, 70):
            x = torch.randn(n, 32)
            out = project(x)
            assert out.shape == (n, width)
            expected = torch.nn.functional.linear(x, rows, b)
            torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(7, 32), (2, 5, 32)])
def test_packed_linear_with_relu_equals_nn_linear_then_relu(shape):
    torch.manual_seed(0)
    linear = nn.Linear(32, 48)
    x = torch.randn(*shape)
    with torch.inference_mode():
        expected = torch.relu(linear(x))
        assert (expected == 0).any()  # the ReLU had something to clip
        torch.testing.assert_close(
            PackedLinear(linear, relu=True)(x), expected, atol=1e-5, rtol=1e-5
        )


def test_pack_linears_replaces_every_linear_and_keeps_the_outputs(checkpoint):
    plain = load_for_inference(str(checkpoint), torch.device("cpu")).model
    packed = load_for_inference(str(checkpoint), torch.device("cpu")).model
    n_linear = sum(type(m) is nn.Linear for m in plain.modules())
    assert pack_linears(packed) == n_linear > 0
    assert not any(type(m) is nn.Linear for m in packed.modules())
    ffns = [m for m in packed.modules() if isinstance(m, FeedForward)]
    assert ffns and all(f.fc1_activates and f.fc1.post_op == "relu" for f in ffns)
    assert all(f.fc2.post_op == "none" for f in ffns)
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 5, 6], [1, 7, 0]])
    with torch.inference_mode():
        torch.testing.assert_close(packed(src, tgt), plain(src, tgt), atol=1e-4, rtol=1e-4)


def test_a_translator_translates_the_same_with_packed_layers(checkpoint):
    texts = ["ein mann fährt rad", "das buch", "zwei hunde spielen im schnee"]
    bundle = load_for_inference(str(checkpoint), torch.device("cpu"))
    plain = Translator(
        bundle.model, (bundle.src_tokenizer, bundle.tgt_tokenizer), bundle.config.decode
    )
    expected = plain.translate(texts)
    pack_linears(bundle.model)
    assert [t.texts for t in plain.translate(texts)] == [t.texts for t in expected]


@pytest.mark.parametrize("relu", [False, True])
def test_packing_pays_measures_a_positive_speed_ratio(relu):
    assert packing_pays(nn.Linear(32, 64), repeats=2, relu=relu) > 0.0


def _kinds(model: nn.Module, layer_type: type) -> set[tuple[int, int, bool]]:
    """(in, out, relu) of the `layer_type` layers of `model`, relu: a relu network's fc1."""
    return {
        (child.in_features, child.out_features, isinstance(parent, FeedForward) and name == "fc1")
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) is layer_type
    }


def test_pack_linears_packs_only_the_kinds_asked_for(checkpoint):
    model = load_for_inference(str(checkpoint), torch.device("cpu")).model
    kinds = _kinds(model, nn.Linear)
    chosen = max(kinds, key=lambda kind: kind[1])
    assert pack_linears(model, {chosen}) > 0
    assert _kinds(model, nn.Linear) == kinds - {chosen}
    assert _kinds(model, PackedLinear) == {chosen}


def test_pack_where_it_pays_times_every_kind_of_the_model(checkpoint, monkeypatch):
    model = load_for_inference(str(checkpoint), torch.device("cpu")).model
    kinds = _kinds(model, nn.Linear)
    assert (16, 32, True) in kinds and (16, 32, False) not in kinds  # fc1 is timed with relu
    speedups = {}

    def timed(layer, relu=False):
        speedups[(layer.in_features, layer.out_features, relu)] = packing_pays(layer, 2, relu)
        return speedups[(layer.in_features, layer.out_features, relu)]

    monkeypatch.setattr(packed, "packing_pays", timed)
    paying = pack_where_it_pays(model, TimedChoices(None, {}))
    assert set(speedups) == kinds and all(s > 0.0 for s in speedups.values())
    assert paying == {k for k, s in speedups.items() if s >= PACKING_SPEEDUP}
    assert _kinds(model, PackedLinear) == paying
