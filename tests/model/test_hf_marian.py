"""Our model against a randomly initialised Hugging Face MarianMTModel with the same weights."""

import pytest
import torch
from torch.testing import assert_close

from transformer_mt.config import ModelConfig
from transformer_mt.errors import TmtError
from transformer_mt.interop.hf_bart import UnsupportedConfig, ignored_settings
from transformer_mt.interop.hf_marian import (
    MARIAN,
    check_marian_config,
    from_marian,
    from_marian_weights,
    to_marian,
    to_marian_state_dict,
)
from transformer_mt.interop.limits import check_expressible
from transformer_mt.model import build_model

transformers = pytest.importorskip("transformers")

V, PAD, BOS, EOS = 40, 0, 2, 3


def marian_config(**changes):
    kwargs = dict(
        vocab_size=V,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function="relu",
        max_position_embeddings=64,
        scale_embedding=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
        dropout=0.0,
    )
    kwargs.update(changes)
    return transformers.MarianConfig(**kwargs)


def marian(logits_bias=True, **changes):
    """A random Marian, its weights 4x HF's initialisation; with `logits_bias`, a non-zero
    final_logits_bias as OPUS-MT's. At HF's own scale (std 0.02) the logits were that bias
    and the decoder's positions: changing every source token moved them by 0.0009, so an
    encoder without its padding mask or attention scaled by 1/d passed at atol 1e-4."""
    torch.manual_seed(0)
    model = transformers.MarianMTModel(marian_config(**changes)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name:  # the sinusoids stay as they are
                p.mul_(4.0)
        if logits_bias:
            model.final_logits_bias.normal_()
    return model


def batch(tgt_vocab=V):
    """Right-padded sources and targets (BOS first), as our batches are."""
    src = torch.randint(4, V, (3, 7))
    src[1, 4:] = PAD
    src[2, 2:] = PAD
    tgt = torch.randint(4, tgt_vocab, (3, 5))
    tgt[:, 0] = BOS
    tgt[2, 3:] = PAD
    return src, tgt


def hf_logits(hf, src, tgt):
    with torch.no_grad():
        out = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt)
    return out.logits


# OPUS-MT's variants: activation, scale_embedding false, separate vocabularies (OPUS-MT
# tc-big), an untied output projection, and transformers 5's untied share (three tables).
MARIAN_VARIANTS = [
    pytest.param({}, id="relu"),
    pytest.param({"activation_function": "gelu"}, id="gelu"),
    pytest.param({"activation_function": "swish"}, id="swish"),
    pytest.param({"activation_function": "swish", "scale_embedding": False}, id="unscaled"),
    pytest.param(
        {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": V + 8},
        id="separate-vocab",
    ),
    pytest.param(
        {
            "share_encoder_decoder_embeddings": False,
            "decoder_vocab_size": V + 8,
            "tie_word_embeddings": False,
        },
        id="separate-vocab-untied",
    ),
    pytest.param({"tie_word_embeddings": False}, id="shared-untied"),
]


@pytest.mark.parametrize("changes", MARIAN_VARIANTS)
def test_logits_equal_marian(changes):
    hf = marian(**changes)
    ours = from_marian(hf).eval()
    src, tgt = batch(hf.config.decoder_vocab_size)
    with torch.no_grad():
        logits = ours(src, tgt)
    assert_close(logits, hf_logits(hf, src, tgt), atol=1e-4, rtol=1e-4)


def test_the_logits_compared_depend_on_the_source_and_its_padding():
    """What makes `test_logits_equal_marian` a proof of the encoder and of attention: the
    logits move far beyond its tolerance with the source's tokens and with what lies under
    its padding (read where the mask is not applied)."""
    hf = marian()
    src, tgt = batch()
    other = src.clone()
    other[src != PAD] = (src[src != PAD] + 1 - 4) % (V - 4) + 4
    under_padding = src.masked_fill(src == PAD, 5)
    with torch.no_grad():
        logits = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt)
        moved = hf(input_ids=other, attention_mask=(src != PAD).long(), decoder_input_ids=tgt)
        unmasked = hf(input_ids=under_padding, decoder_input_ids=tgt)
    assert (moved.logits - logits.logits).abs().max() > 0.1
    assert (unmasked.logits - logits.logits)[1:].abs().max() > 0.1


@pytest.mark.parametrize("changes", MARIAN_VARIANTS[2:5])
def test_cached_decoding_equals_marian_step_by_step(changes):
    hf = marian(**changes)
    ours = from_marian(hf).eval()
    src, tgt = batch(hf.config.decoder_vocab_size)
    expected = torch.log_softmax(hf_logits(hf, src, tgt), dim=-1)
    src_mask = ours.src_mask(src)
    cache, rows = None, ours.source_rows(torch.arange(src.size(0)), src.size(0))
    with torch.no_grad():
        memory = ours.encode(src, src_mask)
        for t in range(tgt.size(1)):
            log_probs, cache = ours.decode_step(tgt[:, t], memory, src_mask, rows, cache)
            assert_close(log_probs, expected[:, t], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("changes", [MARIAN_VARIANTS[2], MARIAN_VARIANTS[3], MARIAN_VARIANTS[5]])
def test_marian_to_ours_and_back_gives_the_same_state_dict(changes):
    hf = marian(**changes)
    converted = from_marian_weights(hf.config, hf.state_dict())
    assert converted.cfg.output_bias
    back = to_marian_state_dict(converted.build())
    original = hf.state_dict()
    assert set(back) == set(original)
    for name, tensor in original.items():
        assert_close(back[name], tensor, atol=1e-6, rtol=0, msg=name)


def test_zero_logits_bias_maps_to_no_output_bias():
    converted = from_marian_weights(marian_config(), marian(logits_bias=False).state_dict())
    assert not converted.cfg.output_bias
    assert "output_projection.bias" not in converted.state


OURS = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64)


@pytest.mark.parametrize(
    "options, tgt_vocab",
    [
        ({}, V),
        ({"share_embeddings": False}, V + 8),
        ({"tie_output": False}, V),
        ({"share_embeddings": False, "tie_output": False, "n_decoder_layers": 1}, V + 8),
        ({"activation": "swish", "output_bias": True, "scale_embeddings": False}, V),
    ],
)
def test_to_marian_keeps_logits_for_separate_vocabularies_and_untied_output(options, tgt_vocab):
    ours = build_model(ModelConfig(**OURS, **options), V, tgt_vocab)
    ours.eval()
    if ours.cfg.output_bias:
        with torch.no_grad():
            ours.output_projection.bias.normal_()
    hf = to_marian(ours, BOS, EOS)
    assert hf.config.share_encoder_decoder_embeddings == options.get("share_embeddings", True)
    assert hf.config.decoder_vocab_size == tgt_vocab
    src, tgt = batch(tgt_vocab)
    with torch.no_grad():
        expected = ours(src, tgt)
    assert_close(hf_logits(hf, src, tgt), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "options",
    [{}, {"share_embeddings": False, "tie_output": False}, {"output_bias": True}],
)
def test_round_trip_ours_hf_ours_is_exact(options):
    ours = build_model(ModelConfig(**OURS, **options), V)
    if ours.cfg.output_bias:
        with torch.no_grad():
            ours.output_projection.bias.normal_()
    back = from_marian(to_marian(ours, BOS, EOS))
    assert back.cfg == ours.cfg
    original = ours.state_dict()
    assert set(back.state_dict()) == set(original)
    for name, tensor in back.state_dict().items():
        assert torch.equal(tensor, original[name]), name


def test_marian_sinusoids_equal_ours():
    hf = marian()
    ours = from_marian(hf)
    assert_close(ours.encoder.embed.positions.table, hf.model.encoder.embed_positions.weight)


def test_position_table_other_than_the_sinusoids_is_refused():
    hf = marian()
    state = hf.state_dict()
    state["model.decoder.embed_positions.weight"] = torch.randn(64, 32)
    with pytest.raises(TmtError, match="model.decoder.embed_positions.weight is not the sinus"):
        from_marian_weights(hf.config, state)


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"activation_function": "gelu_new"}, "activation_function"),
        ({"decoder_attention_heads": 2}, "decoder_attention_heads"),
        ({"decoder_ffn_dim": 32}, "decoder_ffn_dim"),
        ({"d_model": 33, "encoder_attention_heads": 3, "decoder_attention_heads": 3}, "d_model"),
        ({"decoder_vocab_size": V + 8}, "decoder_vocab_size"),
        ({"normalize_before": True}, "normalize_before"),
        ({"normalize_embedding": True}, "normalize_embedding"),
        ({"static_position_embeddings": False}, "static_position_embeddings"),
        ({"add_bias_logits": True}, "add_bias_logits"),
    ],
)
def test_marian_configs_we_cannot_compute_are_refused_by_key(changes, key):
    with pytest.raises(UnsupportedConfig, match=f"{key}=") as err:
        check_marian_config(marian_config(**changes))
    assert err.value.keys == (key,)


def test_opus_mt_legacy_keys_and_layerdrop_are_accepted():
    """An OPUS-MT config.json's BART-era keys hold the values Marian computes; LayerDrop acts
    only in training, which the mapping says."""
    hf_config = marian_config(
        normalize_before=False,
        normalize_embedding=False,
        static_position_embeddings=True,
        add_bias_logits=False,
        add_final_layer_norm=False,
        extra_pos_embeddings=V + 1,
        encoder_layerdrop=0.1,
    )
    check_marian_config(hf_config)
    assert ignored_settings(hf_config) == [
        "encoder_layerdrop=0.1 (LayerDrop skips layers in training only; ours has none)"
    ]


@pytest.mark.parametrize(
    "change,word",
    [
        (dict(pre_norm=True), "pre_norm"),
        (dict(positions="learned"), "positions"),
        (dict(positions="sinusoidal_fairseq"), "model.positions=sinusoidal_fairseq"),
        (dict(position_offset=2), "model.position_offset=2"),
        (dict(layer_norm_eps=0.5), r"model.layer_norm_eps=0.5 \(Marian's LayerNorm eps is fixed"),
    ],
)
def test_options_marian_lacks_are_refused(change, word):
    with pytest.raises(TmtError, match=word):
        check_expressible(MARIAN, ModelConfig(**change))
