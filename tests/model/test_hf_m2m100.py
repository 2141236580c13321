"""Our model against a randomly initialised Hugging Face M2M100ForConditionalGeneration (the
architecture of M2M100 and NLLB-200) with the same weights."""

import pytest
import torch
from torch.testing import assert_close

from transformer_mt.config import ModelConfig
from transformer_mt.errors import TmtError
from transformer_mt.interop.hf_bart import UnsupportedConfig, ignored_settings
from transformer_mt.interop.hf_m2m100 import (
    check_m2m100_config,
    from_m2m100,
    from_m2m100_weights,
    m2m100_limits,
    to_m2m100,
    to_m2m100_state_dict,
)
from transformer_mt.interop.limits import check_expressible
from transformer_mt.model import build_model

transformers = pytest.importorskip("transformers")

# M2M100's and NLLB's special ids: the decoder starts from EOS (then the language token).
V, BOS, PAD, EOS = 40, 0, 1, 2


def m2m100_config(**changes):
    """A tiny config with M2M100's defaults otherwise (LayerDrop 0.05, attention dropout 0.1:
    both act only in training)."""
    kwargs = dict(
        vocab_size=V,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=EOS,
    )
    kwargs.update(changes)
    return transformers.M2M100Config(**kwargs)


def m2m100(**changes):
    torch.manual_seed(0)
    return transformers.M2M100ForConditionalGeneration(m2m100_config(**changes)).eval()


def batch():
    """Right-padded sources and targets (EOS first, as M2M100 starts its decoder)."""
    src = torch.randint(3, V, (3, 7))
    src[1, 4:] = PAD
    src[2, 2:] = PAD
    tgt = torch.randint(3, V, (3, 5))
    tgt[:, 0] = EOS
    tgt[2, 3:] = PAD
    return src, tgt


def hf_logits(hf, src, tgt):
    with torch.no_grad():
        out = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt)
    return out.logits


VARIANTS = [
    pytest.param({}, id="m2m100"),
    pytest.param({"activation_function": "gelu", "decoder_layers": 1}, id="gelu"),
    pytest.param({"activation_function": "swish", "scale_embedding": False}, id="unscaled"),
    pytest.param({"tie_word_embeddings": False}, id="untied"),  # three tables in transformers 5
]


@pytest.mark.parametrize("changes", VARIANTS)
def test_logits_equal_m2m100(changes):
    """At pad positions too: both give pad tokens a zero position vector."""
    hf = m2m100(**changes)
    ours = from_m2m100(hf).eval()
    src, tgt = batch()
    with torch.no_grad():
        logits = ours(src, tgt)
    assert_close(logits, hf_logits(hf, src, tgt), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("changes", VARIANTS[:3])
def test_cached_decoding_equals_m2m100_step_by_step(changes):
    hf = m2m100(**changes)
    ours = from_m2m100(hf).eval()
    src, tgt = batch()
    expected = torch.log_softmax(hf_logits(hf, src, tgt), dim=-1)
    src_mask = ours.src_mask(src)
    cache, rows = None, ours.source_rows(torch.arange(src.size(0)), src.size(0))
    with torch.no_grad():
        memory = ours.encode(src, src_mask)
        for t in range(tgt.size(1)):
            log_probs, cache = ours.decode_step(tgt[:, t], memory, src_mask, rows, cache)
            assert_close(log_probs, expected[:, t], atol=1e-4, rtol=1e-4)


def test_position_table_is_m2m100s_to_the_bit():
    """fairseq's frequencies, [sin | cos], float32; our row t is M2M100's row pad + 1 + t."""
    hf = m2m100()
    ours = from_m2m100(hf)
    assert ours.cfg.position_offset == PAD + 1
    table = ours.decoder.embed.positions.table
    assert torch.equal(table, hf.model.decoder.embed_positions.weights[PAD + 1 : PAD + 1 + 64])


@pytest.mark.parametrize("tie", [True, False])
def test_m2m100_to_ours_and_back_gives_the_same_state_dict(tie):
    hf = m2m100(tie_word_embeddings=tie, activation_function="swish")
    if not tie:  # a checkpoint's one token table, as NLLB's: only the output is untied
        with torch.no_grad():
            for embedding in (hf.model.encoder.embed_tokens, hf.model.decoder.embed_tokens):
                embedding.weight.copy_(hf.model.shared.weight)
    converted = from_m2m100_weights(hf.config, hf.state_dict())
    assert (converted.cfg.share_embeddings, converted.cfg.tie_output) == (True, tie)
    back = to_m2m100_state_dict(converted.build())
    original = hf.state_dict()
    assert set(back) == set(original)
    for name, tensor in original.items():
        assert torch.equal(back[name], tensor), name


OURS = dict(
    d_model=32,
    n_heads=4,
    n_layers=2,
    d_ff=64,
    pre_norm=True,
    positions="sinusoidal_fairseq",
    position_offset=PAD + 1,
    max_positions=64,
)


@pytest.mark.parametrize("options", [{}, {"tie_output": False, "scale_embeddings": False}])
def test_to_m2m100_keeps_logits_and_maps_back_exactly(options):
    ours = build_model(ModelConfig(**OURS, **options), V, pad_id=PAD).eval()
    hf = to_m2m100(ours, bos_id=EOS, eos_id=EOS)
    src, tgt = batch()
    with torch.no_grad():
        expected = ours(src, tgt)
    assert_close(hf_logits(hf, src, tgt), expected, atol=1e-5, rtol=1e-5)
    back = from_m2m100(hf)
    assert back.cfg == ours.cfg
    for name, tensor in back.state_dict().items():
        assert torch.equal(tensor, ours.state_dict()[name]), name


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"activation_function": "gelu_new"}, "activation_function"),
        ({"decoder_attention_heads": 2}, "decoder_attention_heads"),
        ({"layernorm_embedding": True}, "layernorm_embedding"),
        ({"normalize_before": False}, "normalize_before"),
        ({"add_final_layer_norm": False}, "add_final_layer_norm"),
        ({"add_bias_logits": True}, "add_bias_logits"),
        ({"decoder_start_token_id": PAD}, "decoder_start_token_id"),
        ({"pad_token_id": None}, "pad_token_id"),
        ({"dropout": 1.5}, "dropout"),
    ],
)
def test_m2m100_configs_we_cannot_compute_are_refused_by_key(changes, key):
    with pytest.raises(UnsupportedConfig, match=f"{key}=") as err:
        check_m2m100_config(m2m100_config(**changes))
    assert err.value.keys == (key,)


def test_another_architecture_is_refused_by_model_type():
    with pytest.raises(UnsupportedConfig, match="model_type='marian'"):
        check_m2m100_config(transformers.MarianConfig())


def test_layerdrop_is_accepted_and_named_as_training_only():
    hf_config = m2m100_config()
    check_m2m100_config(hf_config)
    assert [note.split("=")[0] for note in ignored_settings(hf_config)] == [
        "encoder_layerdrop",
        "decoder_layerdrop",
    ]


@pytest.mark.parametrize(
    "change, word",
    [
        ({"pre_norm": False}, "model.pre_norm=false"),
        ({"positions": "sinusoidal", "position_offset": 2}, "model.positions=sinusoidal "),
        ({"position_offset": 0}, r"model.position_offset=0 \(M2M100 numbers positions from"),
        ({"output_bias": True}, "model.output_bias=true"),
        ({"share_embeddings": False}, "model.share_embeddings=false"),
        ({"activation": "swiglu"}, "model.activation=swiglu"),
    ],
)
def test_options_m2m100_lacks_are_refused(change, word):
    with pytest.raises(TmtError, match=word):
        check_expressible(m2m100_limits(PAD), ModelConfig(**{**OURS, **change}))
