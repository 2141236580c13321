"""The whole model: state_dict keys, ties, invariances, learning (cache equivalence for every
option is in test_attention_variants.py)."""

import pytest
import torch
from torch.testing import assert_close

from transformer_mt.config import ConfigError, ModelConfig
from transformer_mt.model import build_model

from .tiny import BOS, EOS, OPTIONS, PAD, V, padded_batch, tiny_cfg


def test_config_validation_names_the_field():
    with pytest.raises(ConfigError, match="model.d_model=500 is not divisible by model.n_heads=8"):
        build_model(ModelConfig(d_model=500, n_heads=8), V)


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


def test_decode_step_with_gradients_equals_the_step_without():
    """Without gradients the log-softmax overwrites the logits; with them it must not, and
    both give the same log-probs (attention may take other kernels with gradients)."""
    model = build_model(tiny_cfg(), V).eval()
    src = padded_batch([5, 3])
    src_mask = model.src_mask(src)
    bos = torch.full((2,), BOS)
    rows = torch.arange(2)  # each row reads its own source
    with torch.no_grad():
        plain, _ = model.decode_step(bos, model.encode(src, src_mask), src_mask, rows, None)
    with_grad, _ = model.decode_step(bos, model.encode(src, src_mask), src_mask, rows, None)
    assert with_grad.requires_grad
    assert_close(with_grad.detach(), plain, atol=1e-5, rtol=1e-5)
    with_grad[:, EOS].sum().backward()
    assert model.output_projection.weight.grad is not None


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
    # Options that add no parameter (the sinusoids are a buffer outside the state_dict) ...
    imported = tiny_cfg(
        n_layers=1, positions="sinusoidal_fairseq", position_offset=2, scale_embeddings=False
    )
    assert set(build_model(imported, V).state_dict()) == expected
    # ... and the output bias, a parameter only when on, so older checkpoints load strictly.
    biased = build_model(tiny_cfg(n_layers=1, output_bias=True), V)
    assert set(biased.state_dict()) - expected == {"output_projection.bias"}


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(position_offset=-1), r"model.position_offset=-1 must be in \[0, 1048576\]"),
        (dict(positions="rope", position_offset=2), "model.position_offset=2 needs sinusoidal"),
        (dict(positions="sinusoidal_fairseq", d_model=2, n_heads=1), "model.d_model=2 must be"),
    ],
)
def test_position_options_are_checked_by_name(changes, message):
    with pytest.raises(ConfigError, match=message):
        build_model(tiny_cfg(**changes), V)


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


@pytest.mark.parametrize("pre_norm", [False, True])
def test_every_parameter_gets_gradient(pre_norm):
    torch.manual_seed(0)
    model = build_model(tiny_cfg(pre_norm=pre_norm, d_ff=128), 12)
    src, tgt_in, tgt_out = _copy_task_batch(32, 6, reverse=False)
    logits = model(src, tgt_in)
    torch.nn.functional.cross_entropy(logits.reshape(-1, 12), tgt_out.reshape(-1)).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    "pre_norm,reverse", [(False, False), pytest.param(True, True, marks=pytest.mark.slow)]
)
def test_learns_copy_and_reverse(pre_norm, reverse):
    torch.manual_seed(0)
    model = build_model(tiny_cfg(pre_norm=pre_norm, d_ff=128), 12)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    losses = []
    for _ in range(300):
        src, tgt_in, tgt_out = _copy_task_batch(32, 6, reverse)
        logits = model(src, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 12), tgt_out.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    # Chance is ln(8) ~ 2.1 nats a token; one batch's loss still jitters (0.01-0.09 measured),
    # so judge the mean of the last 20 updates.
    assert sum(losses[-20:]) / 20 < 0.1, losses[-20:]
