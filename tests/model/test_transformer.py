"""The whole model: against Hugging Face Marian, cache equivalence, invariances, learning."""

import pytest
import torch
from torch.testing import assert_close

from transformer_mt.config import ConfigError, ModelConfig
from transformer_mt.model import build_model

V, PAD, BOS, EOS = 40, 0, 2, 3


def tiny_cfg(**changes):
    base = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0, max_positions=64)
    return ModelConfig(**{**base, **changes})


def padded_batch(lengths, max_len=None, low=4):
    """Random ids (B, L) right-padded to the longest length."""
    max_len = max_len or max(lengths)
    ids = torch.randint(low, V, (len(lengths), max_len))
    for row, n in enumerate(lengths):
        ids[row, n:] = PAD
    return ids


def test_config_validation_names_the_field():
    with pytest.raises(ConfigError, match="model.d_model=500 is not divisible by model.n_heads=8"):
        build_model(ModelConfig(d_model=500, n_heads=8), V)


OPTIONS = [
    dict(pre_norm=False),
    dict(pre_norm=True),
    dict(pre_norm=True, positions="learned", activation="swiglu"),
    dict(share_embeddings=False, tie_output=False, activation="gelu", n_decoder_layers=3),
]


@pytest.mark.parametrize("options", OPTIONS)
def test_cached_decoding_equals_full_forward_with_padding_and_reorder(options):
    model = build_model(tiny_cfg(**options), V).eval()
    src = padded_batch([7, 3, 5])
    tgt = torch.randint(4, V, (3, 6))
    tgt[:, 0] = BOS
    src_mask = model.src_mask(src)
    with torch.no_grad():
        full = model(src, tgt, src_mask).log_softmax(-1)  # (B, T, V)
        memory, cache = model.encode(src, src_mask), None
        order = torch.arange(3)
        for t in range(tgt.size(1)):
            if t == 3:  # a beam-style reorder mid-way: rows 2, 0, 0
                order = torch.tensor([2, 0, 0])
                cache = cache.reorder(order)
                memory, src_mask = memory[order], src_mask[order]
            log_probs, cache = model.decode_step(tgt[order, t], memory, src_mask, cache)
            if t < 3:
                assert_close(log_probs, full[:, t], atol=1e-5, rtol=1e-5)
            else:
                expected = model(src[order], tgt[order], model.src_mask(src[order]))
                assert_close(log_probs, expected[:, t].log_softmax(-1), atol=1e-5, rtol=1e-5)
        assert cache.length == tgt.size(1)


@pytest.mark.parametrize("options", OPTIONS[:2])
def test_padding_and_future_tokens_change_nothing(options):
    """Extra pad columns and later target tokens leave earlier real positions unchanged."""
    model = build_model(tiny_cfg(**options), V).eval()
    src = padded_batch([6, 3])
    tgt = torch.randint(4, V, (2, 5))
    with torch.no_grad():
        logits = model(src, tgt)
        longer = torch.cat([src, torch.full((2, 4), PAD)], dim=1)  # extra padding columns
        assert_close(model(longer, tgt), logits, atol=1e-5, rtol=1e-5)
        changed_future = tgt.clone()
        changed_future[:, 3:] = torch.randint(4, V, (2, 2))
        assert_close(model(src, changed_future)[:, :3], logits[:, :3], atol=1e-5, rtol=1e-5)


def test_state_dict_keys_are_pinned():
    """Checkpoint compatibility: renaming a module breaks old checkpoints; update on purpose."""
    model = build_model(tiny_cfg(n_layers=1), V)
    layer = ["self_attn_norm", "ffn.fc1", "ffn.fc2", "ffn_norm"]
    attn = [f"{a}.{p}" for a in ("self_attn",) for p in ("q_proj", "k_proj", "v_proj", "out_proj")]
    cross = [f"cross_attn.{p}" for p in ("q_proj", "k_proj", "v_proj", "out_proj")]
    expected = {"encoder.embed.token_embedding.weight", "decoder.embed.token_embedding.weight"}
    expected.add("output_projection.weight")
    for side, names in (
        ("encoder", attn + layer),
        ("decoder", attn + cross + layer + ["cross_attn_norm"]),
    ):
        for name in names:
            expected |= {f"{side}.layers.0.{name}.weight", f"{side}.layers.0.{name}.bias"}
    assert set(model.state_dict()) == expected
    pre = build_model(tiny_cfg(n_layers=1, pre_norm=True, positions="learned"), V)
    extra = set(pre.state_dict()) - expected
    assert extra == {
        "encoder.final_norm.weight",
        "encoder.final_norm.bias",
        "decoder.final_norm.weight",
        "decoder.final_norm.bias",
        "encoder.embed.positions.weight",
        "decoder.embed.positions.weight",
    }


def test_ties_share_storage_and_untied_do_not():
    tied = build_model(tiny_cfg(), V)
    assert tied.output_projection.weight is tied.decoder.embed.token_embedding.weight
    assert tied.encoder.embed.token_embedding is tied.decoder.embed.token_embedding
    untied = build_model(tiny_cfg(share_embeddings=False, tie_output=False), V, 30)
    assert untied.output_projection.weight.shape == (30, 32)
    assert untied.encoder.embed.token_embedding is not untied.decoder.embed.token_embedding


def _copy_task_batch(batch_size, length, reverse):
    src = torch.randint(4, 12, (batch_size, length))
    body = src.flip(1) if reverse else src
    tgt_in = torch.cat([torch.full((batch_size, 1), BOS), body], dim=1)
    tgt_out = torch.cat([body, torch.full((batch_size, 1), EOS)], dim=1)
    return src, tgt_in, tgt_out


@pytest.mark.parametrize("pre_norm,reverse", [(False, False), (True, True)])
def test_learns_copy_and_reverse_and_every_parameter_gets_gradient(pre_norm, reverse):
    torch.manual_seed(0)
    model = build_model(tiny_cfg(pre_norm=pre_norm, d_ff=128), 12)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    for step in range(300):
        src, tgt_in, tgt_out = _copy_task_batch(32, 6, reverse)
        logits = model(src, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 12), tgt_out.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if step == 0:
            for name, param in model.named_parameters():
                assert param.grad is not None and param.grad.abs().sum() > 0, name
        opt.step()
    assert loss.item() < 0.05, loss.item()
