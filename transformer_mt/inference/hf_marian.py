"""Weight mapping between our model and Hugging Face `MarianMTModel`.

Marian is a post-norm Transformer with sinusoidal positions (concatenated sin/cos layout, like
ours), sqrt(d_model)-scaled embeddings, biased projections and LayerNorms of eps 1e-5 (fixed in
its code, not a config field): the same network as ours with `pre_norm: false`,
`positions: sinusoidal`, `layer_norm_eps: 1e-5`. Separate source and target vocabularies
(`share_embeddings: false`, `decoder_vocab_size`) and an untied output projection
(`tie_word_embeddings: false`) map onto Marian's own options. The mapping is the interop path
for `tmt export --format hf` and the reference the model tests compare against.

The state-dict conversion works on plain dicts, so the core never imports transformers; only
`to_marian` / `from_marian`, which build or read a `MarianMTModel`, import it (extra `hf`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from transformer_mt.config import ModelConfig
from transformer_mt.errors import TmtError
from transformer_mt.model import Seq2SeqTransformer, build_model

# (ours, Marian) names inside one layer; projections carry weight and bias.
_ATTENTION = ["q_proj", "k_proj", "v_proj", "out_proj"]
_ENCODER_LAYER = [
    *[(f"self_attn.{p}", f"self_attn.{p}") for p in _ATTENTION],
    ("self_attn_norm", "self_attn_layer_norm"),
    ("ffn.fc1", "fc1"),
    ("ffn.fc2", "fc2"),
    ("ffn_norm", "final_layer_norm"),
]
_DECODER_LAYER = [
    *_ENCODER_LAYER,
    *[(f"cross_attn.{p}", f"encoder_attn.{p}") for p in _ATTENTION],
    ("cross_attn_norm", "encoder_attn_layer_norm"),
]


# nn.LayerNorm's default, which every Marian LayerNorm uses.
MARIAN_LAYER_NORM_EPS = 1e-5


def check_marian_compatible(cfg: ModelConfig) -> None:
    """Raise TmtError naming the option Marian cannot represent."""
    problems = []
    if cfg.layer_norm_eps != MARIAN_LAYER_NORM_EPS:
        problems.append(
            f"model.layer_norm_eps={cfg.layer_norm_eps} (Marian's LayerNorm eps is fixed at 1e-5)"
        )
    if cfg.pre_norm:
        problems.append("model.pre_norm=true (Marian is post-norm)")
    if cfg.positions != "sinusoidal":
        problems.append(f"model.positions={cfg.positions} (Marian has sinusoidal only)")
    if cfg.activation == "swiglu":
        problems.append("model.activation=swiglu (Marian has no gated feed-forward)")
    if cfg.kv_heads != cfg.n_heads:
        problems.append(
            f"model.n_kv_heads={cfg.n_kv_heads} (Marian has one key/value head per query head)"
        )
    if cfg.attention_pattern != "full":
        problems.append(
            f"model.attention_pattern={cfg.attention_pattern} (Marian attends to every position)"
        )
    if cfg.attention != "mha":
        problems.append(f"model.attention={cfg.attention} (Marian has standard attention only)")
    if problems:
        raise TmtError("cannot map to Hugging Face Marian: " + "; ".join(problems))


def _name_pairs(cfg: ModelConfig) -> list[tuple[str, str]]:
    pairs = []
    for side, n_layers, layer_names in (
        ("encoder", cfg.n_layers, _ENCODER_LAYER),
        ("decoder", cfg.decoder_layers, _DECODER_LAYER),
    ):
        for i in range(n_layers):
            for ours, theirs in layer_names:
                for param in ("weight", "bias"):
                    pairs.append(
                        (
                            f"{side}.layers.{i}.{ours}.{param}",
                            f"model.{side}.layers.{i}.{theirs}.{param}",
                        )
                    )
    return pairs


def to_marian_state_dict(model: Seq2SeqTransformer) -> dict[str, Tensor]:
    """Our parameters under Marian's names (positions and a zero final_logits_bias included).

    `model.shared` exists in Marian only when it shares one table between encoder and decoder.
    """
    check_marian_compatible(model.cfg)
    ours = model.state_dict()
    out = {theirs: ours[name].clone() for name, theirs in _name_pairs(model.cfg)}
    src_embedding = ours["encoder.embed.token_embedding.weight"]
    if model.cfg.share_embeddings:
        out["model.shared.weight"] = src_embedding.clone()
    out["model.encoder.embed_tokens.weight"] = src_embedding.clone()
    out["model.decoder.embed_tokens.weight"] = ours["decoder.embed.token_embedding.weight"].clone()
    out["lm_head.weight"] = ours["output_projection.weight"].clone()
    for side in ("encoder", "decoder"):
        out[f"model.{side}.embed_positions.weight"] = getattr(model, side).embed.positions.table
    out["final_logits_bias"] = torch.zeros(1, out["lm_head.weight"].size(0))
    return out


def from_marian_state_dict(state: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Marian's parameters under our names, ready for `load_state_dict(strict=True)`."""
    check_marian_compatible(cfg)
    bias = state.get("final_logits_bias")
    if bias is not None and bias.abs().max() > 0:
        raise TmtError("cannot map from Marian: final_logits_bias is non-zero (we have no bias)")
    out = {name: state[theirs].clone() for name, theirs in _name_pairs(cfg)}
    src_embedding = state["model.encoder.embed_tokens.weight"]
    out["encoder.embed.token_embedding.weight"] = src_embedding.clone()
    out["decoder.embed.token_embedding.weight"] = state["model.decoder.embed_tokens.weight"].clone()
    out["output_projection.weight"] = state["lm_head.weight"].clone()
    return out


def marian_config_kwargs(
    cfg: ModelConfig,
    src_vocab_size: int,
    tgt_vocab_size: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
) -> dict[str, Any]:
    """Keyword arguments of `transformers.MarianConfig` for an equivalent model."""
    check_marian_compatible(cfg)
    return {
        "vocab_size": src_vocab_size,
        "decoder_vocab_size": tgt_vocab_size,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.n_layers,
        "decoder_layers": cfg.decoder_layers,
        "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff,
        "activation_function": cfg.activation,
        "max_position_embeddings": cfg.max_positions,
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attn_dropout,
        "activation_dropout": cfg.activation_dropout,
        "scale_embedding": True,
        "share_encoder_decoder_embeddings": cfg.share_embeddings,
        "tie_word_embeddings": cfg.tie_output,
        "pad_token_id": pad_id,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "forced_eos_token_id": eos_id,
        "decoder_start_token_id": bos_id,
    }


def model_config_from_marian(hf_config: Any) -> ModelConfig:
    """Our ModelConfig for a `transformers.MarianConfig` (refuses what we cannot express)."""
    if hf_config.encoder_attention_heads != hf_config.decoder_attention_heads:
        raise TmtError("cannot map from Marian: encoder and decoder head counts differ")
    if hf_config.encoder_ffn_dim != hf_config.decoder_ffn_dim:
        raise TmtError("cannot map from Marian: encoder and decoder FFN sizes differ")
    if not hf_config.scale_embedding:
        raise TmtError("cannot map from Marian: scale_embedding=False is not supported")
    if hf_config.activation_function not in ("relu", "gelu"):
        raise TmtError(f"cannot map from Marian: activation {hf_config.activation_function!r}")
    return ModelConfig(
        d_model=hf_config.d_model,
        n_heads=hf_config.encoder_attention_heads,
        n_layers=hf_config.encoder_layers,
        n_decoder_layers=hf_config.decoder_layers,
        d_ff=hf_config.encoder_ffn_dim,
        dropout=float(hf_config.dropout),
        attn_dropout=float(hf_config.attention_dropout),
        activation_dropout=float(hf_config.activation_dropout),
        activation=hf_config.activation_function,
        max_positions=hf_config.max_position_embeddings,
        share_embeddings=hf_config.share_encoder_decoder_embeddings,
        tie_output=hf_config.tie_word_embeddings,
    )


def to_marian(model: Seq2SeqTransformer, bos_id: int = 2, eos_id: int = 3) -> Any:
    """A `transformers.MarianMTModel` computing the same function as `model`."""
    from transformers import MarianConfig, MarianMTModel

    src_vocab_size = model.encoder.embed.token_embedding.weight.size(0)
    tgt_vocab_size = model.output_projection.weight.size(0)
    kwargs = marian_config_kwargs(
        model.cfg, src_vocab_size, tgt_vocab_size, model.pad_id, bos_id, eos_id
    )
    hf_model = MarianMTModel(MarianConfig(**kwargs))
    hf_model.load_state_dict(to_marian_state_dict(model), strict=True)
    return hf_model.eval()


def from_marian(hf_model: Any) -> Seq2SeqTransformer:
    """Our model with the weights of a `transformers.MarianMTModel`."""
    cfg = model_config_from_marian(hf_model.config)
    vocab_size = hf_model.config.vocab_size
    model = build_model(
        cfg, vocab_size, hf_model.config.decoder_vocab_size, hf_model.config.pad_token_id
    )
    model.load_state_dict(from_marian_state_dict(hf_model.state_dict(), cfg), strict=True)
    return model
