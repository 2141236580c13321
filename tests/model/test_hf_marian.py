"""Our model against a randomly initialised Hugging Face MarianMTModel with the same weights."""

import pytest
import torch
from torch.testing import assert_close

from transformer_mt.config import ModelConfig
from transformer_mt.errors import TmtError
from transformer_mt.inference.hf_marian import check_marian_compatible, from_marian, to_marian
from transformer_mt.model import build_model

transformers = pytest.importorskip("transformers")

V, PAD, BOS, EOS = 40, 0, 2, 3


def marian(**changes):
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
    torch.manual_seed(0)
    return transformers.MarianMTModel(transformers.MarianConfig(**kwargs)).eval()


def batch():
    src = torch.randint(4, V, (3, 7))
    src[1, 4:] = PAD
    src[2, 2:] = PAD
    tgt = torch.randint(4, V, (3, 5))
    tgt[:, 0] = BOS
    return src, tgt


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_logits_equal_marian(activation):
    hf = marian(activation_function=activation)
    ours = from_marian(hf).eval()
    src, tgt = batch()
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt)
        logits = ours(src, tgt)
    assert_close(logits, expected.logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "options, tgt_vocab",
    [
        ({}, V),
        ({"share_embeddings": False}, V + 8),
        ({"tie_output": False}, V),
        ({"share_embeddings": False, "tie_output": False, "n_decoder_layers": 1}, V + 8),
    ],
)
def test_to_marian_keeps_logits_for_separate_vocabularies_and_untied_output(options, tgt_vocab):
    ours = build_model(
        ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, **options), V, tgt_vocab
    )
    ours.eval()
    hf = to_marian(ours)
    assert hf.config.share_encoder_decoder_embeddings == options.get("share_embeddings", True)
    assert hf.config.decoder_vocab_size == tgt_vocab
    src, tgt = batch()
    with torch.no_grad():
        expected = ours(src, tgt)
        theirs = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt)
    assert_close(theirs.logits, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options", [{}, {"share_embeddings": False, "tie_output": False}])
def test_round_trip_ours_hf_ours_is_exact(options):
    ours = build_model(ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, **options), V)
    back = from_marian(to_marian(ours))
    assert back.cfg.tie_output == ours.cfg.tie_output
    original = ours.state_dict()
    assert set(back.state_dict()) == set(original)
    for name, tensor in back.state_dict().items():
        assert torch.equal(tensor, original[name]), name


def test_marian_sinusoids_equal_ours():
    hf = marian()
    ours = from_marian(hf)
    assert_close(ours.encoder.embed.positions.table, hf.model.encoder.embed_positions.weight)


@pytest.mark.parametrize(
    "change,word",
    [
        (dict(pre_norm=True), "pre_norm"),
        (dict(positions="learned"), "positions"),
        (dict(layer_norm_eps=0.5), r"model.layer_norm_eps=0.5 \(Marian's LayerNorm eps is fixed"),
    ],
)
def test_options_marian_lacks_are_refused(change, word):
    with pytest.raises(TmtError, match=word):
        check_marian_compatible(ModelConfig(**change))
