"""Weight mapping between our model and Hugging Face `MarianMTModel` (OPUS-MT's architecture).

Marian is a post-norm Transformer with sinusoidal positions (the paper's frequencies
10000^(-2i/D), numbered from 0, in the concatenated [sin | cos] layout, like ours), embeddings
scaled by sqrt(d_model) when `scale_embedding` (OPUS-MT: true), biased projections, LayerNorms
of eps 1e-5 (fixed in its code, not a config field) and a `final_logits_bias` added to the
logits (OPUS-MT checkpoints carry a non-zero one): the same network as ours with
`pre_norm: false`, `positions: sinusoidal`, `layer_norm_eps: 1e-5`, `output_bias: true`.
Its activations relu, gelu (the exact erf GELU, like ours) and swish (SiLU, most OPUS-MT
models) are ours. Separate source and target vocabularies (`share_embeddings: false`,
`decoder_vocab_size`) and an untied output projection (`tie_word_embeddings: false`) map onto
Marian's own options. The mapping is the interop path for `tmt export --format hf` and the
reference the model tests compare against. `hf_m2m100.py` maps M2M100/NLLB with the same
layer names.

Keys of older (BART-era) configs that transformers reads no more (`normalize_before`,
`normalize_embedding`, ...) are checked too: a value that describes another network than the
one transformers (and we) compute is refused by name.

The state-dict conversion works on plain dicts, so the core never imports transformers; only
`to_marian` / `from_marian`, which build or read a `MarianMTModel`, import it (extra `hf`).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from transformer_mt.config import ModelConfig
from transformer_mt.errors import TmtError
from transformer_mt.model import Seq2SeqTransformer, build_model
from transformer_mt.model.embeddings import sinusoidal_table

# (ours, Hugging Face) names inside one layer, the same in Marian and M2M100; projections
# carry weight and bias.
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

# nn.LayerNorm's default, which every Marian (and M2M100) LayerNorm uses.
MARIAN_LAYER_NORM_EPS = 1e-5

# transformers' ACT2FN names -> ours: "gelu" and "gelu_python" are the exact erf GELU (F.gelu's
# default, like ours); "swish" (nn.SiLU) and "silu" are x * sigmoid(x). The tanh-approximated
# GELUs (gelu_new, gelu_fast, gelu_pytorch_tanh) and the rest are not ours.
HF_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_python": "gelu",
    "swish": "swish",
    "silu": "swish",
}

# Keys of transformers 3.x configs (BART era) that OPUS-MT config files still carry and
# today's MarianMTModel ignores: the value Marian's code computes, and what another value
# would ask for. OPUS-MT files hold exactly these values.
_MARIAN_LEGACY_KEYS = {
    "normalize_before": (False, "pre-norm layers; Marian is post-norm"),
    "add_final_layer_norm": (False, "a final LayerNorm on each stack; Marian has none"),
    "normalize_embedding": (False, "a LayerNorm on the embeddings; Marian has none"),
    "layernorm_embedding": (False, "a LayerNorm on the embeddings; Marian has none"),
    "static_position_embeddings": (True, "learned positions; Marian's are sinusoidal"),
    "add_bias_logits": (False, "a second logits bias; Marian has final_logits_bias only"),
}


class UnsupportedConfig(TmtError):
    """A Hugging Face config that our model cannot compute; `keys` names the keys blamed."""

    def __init__(self, architecture: str, problems: list[tuple[str, str]]):
        self.keys = tuple(key for key, _ in problems)
        reasons = "; ".join(reason for _, reason in problems)
        super().__init__(f"cannot map from Hugging Face {architecture}: {reasons}")


@dataclass(frozen=True)
class ConvertedModel:
    """A Hugging Face model as ours: what `build_model` takes, and the weights to load."""

    cfg: ModelConfig
    state: dict[str, Tensor]  # our names, for load_state_dict(strict=True)
    src_vocab_size: int
    tgt_vocab_size: int
    pad_id: int

    def build(self) -> Seq2SeqTransformer:
        """Our model holding these weights."""
        model = build_model(self.cfg, self.src_vocab_size, self.tgt_vocab_size, self.pad_id)
        model.load_state_dict(self.state, strict=True)
        return model


def config_problems(
    hf_config: Any, model_type: str, legacy_keys: dict[str, tuple[Any, str]]
) -> list[tuple[str, str]]:
    """(key, "key=value (why)") for every value of `hf_config` that a Marian or M2M100
    architecture (`model_type`) holds and our model cannot compute."""
    problems = []

    def refuse(key: str, why: str) -> None:
        problems.append((key, f"{key}={getattr(hf_config, key, None)!r} ({why})"))

    if getattr(hf_config, "model_type", None) != model_type:
        refuse("model_type", f"this mapping reads {model_type} models")
    if hf_config.encoder_attention_heads != hf_config.decoder_attention_heads:
        refuse("decoder_attention_heads", "differs from encoder_attention_heads; ours share one")
    if hf_config.encoder_ffn_dim != hf_config.decoder_ffn_dim:
        refuse("decoder_ffn_dim", "differs from encoder_ffn_dim; ours share one")
    if hf_config.activation_function not in HF_ACTIVATIONS:
        refuse("activation_function", f"ours are {', '.join(sorted(HF_ACTIVATIONS))}")
    if hf_config.d_model % 2:
        refuse("d_model", "odd; sinusoidal positions need an even width")
    for key in ("dropout", "attention_dropout", "activation_dropout"):
        value = getattr(hf_config, key)
        if not isinstance(value, numbers.Real) or isinstance(value, bool) or not 0 <= value < 1:
            refuse(key, "a dropout probability in [0, 1) is needed")
    for key, (expected, meaning) in legacy_keys.items():
        if getattr(hf_config, key, expected) != expected:
            refuse(key, f"{meaning}; transformers ignores this legacy key")
    return problems


def check_marian_config(hf_config: Any) -> None:
    """Raise `UnsupportedConfig` naming every key of a `transformers.MarianConfig` whose value
    we cannot compute.

    `encoder_layerdrop` / `decoder_layerdrop` are accepted: LayerDrop skips layers only in
    training, so translation is unchanged; our trainer has none (see `ignored_settings`).
    """
    problems = config_problems(hf_config, "marian", _MARIAN_LEGACY_KEYS)
    shared = hf_config.share_encoder_decoder_embeddings
    if shared and hf_config.decoder_vocab_size != hf_config.vocab_size:
        problems.append(
            (
                "decoder_vocab_size",
                f"decoder_vocab_size={hf_config.decoder_vocab_size} (differs from vocab_size="
                f"{hf_config.vocab_size} with share_encoder_decoder_embeddings=True)",
            )
        )
    if problems:
        raise UnsupportedConfig("Marian", problems)


def ignored_settings(hf_config: Any) -> list[str]:
    """Settings of a Marian or M2M100 config that act in training only and that our model
    leaves out, as "key=value (why)": nothing a translation depends on."""
    notes = []
    for key in ("encoder_layerdrop", "decoder_layerdrop"):
        value = getattr(hf_config, key, 0)
        if value:
            notes.append(f"{key}={value} (LayerDrop skips layers in training only; ours has none)")
    return notes


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
    if cfg.position_offset:
        problems.append(
            f"model.position_offset={cfg.position_offset} (Marian numbers positions from 0)"
        )
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


def layer_name_pairs(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(our name, Hugging Face name) of every layer parameter, Marian's and M2M100's alike."""
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


def decoder_layers(hf_config: Any) -> int | None:
    """Our n_decoder_layers: None when the decoder has as many layers as the encoder."""
    n = hf_config.decoder_layers
    return None if n == hf_config.encoder_layers else n


def same_tensor(state: dict[str, Tensor], a: str, b: str) -> bool:
    """Whether `state[a]` and `state[b]` hold the same values (tied, or loaded as one)."""
    return state[a].shape == state[b].shape and torch.equal(state[a], state[b])


def to_marian_state_dict(model: Seq2SeqTransformer) -> dict[str, Tensor]:
    """Our parameters under Marian's names (positions and final_logits_bias included: our
    output bias, or zeros without one).

    `model.shared` exists in Marian only when it shares one table between encoder and decoder.
    """
    check_marian_compatible(model.cfg)
    ours = model.state_dict()
    out = {theirs: ours[name].clone() for name, theirs in layer_name_pairs(model.cfg)}
    src_embedding = ours["encoder.embed.token_embedding.weight"]
    if model.cfg.share_embeddings:
        out["model.shared.weight"] = src_embedding.clone()
    out["model.encoder.embed_tokens.weight"] = src_embedding.clone()
    out["model.decoder.embed_tokens.weight"] = ours["decoder.embed.token_embedding.weight"].clone()
    out["lm_head.weight"] = ours["output_projection.weight"].clone()
    for side in ("encoder", "decoder"):
        out[f"model.{side}.embed_positions.weight"] = getattr(model, side).embed.positions.table
    if model.cfg.output_bias:
        out["final_logits_bias"] = ours["output_projection.bias"][None].clone()
    else:
        out["final_logits_bias"] = torch.zeros(1, out["lm_head.weight"].size(0))
    return out


def _check_marian_positions(state: dict[str, Tensor], cfg: ModelConfig) -> None:
    """Refuse position tables in `state` other than the sinusoids we compute (a checkpoint
    may carry its own; transformers then uses them)."""
    ours = sinusoidal_table(cfg.max_positions, cfg.d_model)
    for side in ("encoder", "decoder"):
        key = f"model.{side}.embed_positions.weight"
        table = state.get(key)
        if table is not None and (table.shape != ours.shape or not torch.allclose(table, ours)):
            raise TmtError(f"cannot map from Marian: {key} is not the sinusoidal table")


def from_marian_state_dict(state: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Marian's parameters under our names, ready for `load_state_dict(strict=True)`."""
    check_marian_compatible(cfg)
    _check_marian_positions(state, cfg)
    bias = state.get("final_logits_bias")
    if not cfg.output_bias and bias is not None and bias.abs().max() > 0:
        raise TmtError(
            "cannot map from Marian: final_logits_bias is non-zero and model.output_bias=false"
        )
    out = {name: state[theirs].clone() for name, theirs in layer_name_pairs(cfg)}
    src_embedding = state["model.encoder.embed_tokens.weight"]
    out["encoder.embed.token_embedding.weight"] = src_embedding.clone()
    out["decoder.embed.token_embedding.weight"] = state["model.decoder.embed_tokens.weight"].clone()
    out["output_projection.weight"] = state["lm_head.weight"].clone()
    if cfg.output_bias:
        out["output_projection.bias"] = bias[0].clone()
    return out


def stack_config_kwargs(cfg: ModelConfig) -> dict[str, Any]:
    """The keys of a BART-family config (Marian, M2M100) that size the two stacks."""
    return {
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
        "scale_embedding": cfg.scale_embeddings,
    }


def stack_settings(hf_config: Any) -> dict[str, Any]:
    """`ModelConfig` keywords read from a BART-family config's stack sizes (checked before)."""
    return {
        "d_model": hf_config.d_model,
        "n_heads": hf_config.encoder_attention_heads,
        "n_layers": hf_config.encoder_layers,
        "n_decoder_layers": decoder_layers(hf_config),
        "d_ff": hf_config.encoder_ffn_dim,
        "dropout": float(hf_config.dropout),
        "attn_dropout": float(hf_config.attention_dropout),
        "activation_dropout": float(hf_config.activation_dropout),
        "activation": HF_ACTIVATIONS[hf_config.activation_function],
        "max_positions": hf_config.max_position_embeddings,
        "scale_embeddings": bool(hf_config.scale_embedding),
    }


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
        **stack_config_kwargs(cfg),
        "share_encoder_decoder_embeddings": cfg.share_embeddings,
        "tie_word_embeddings": cfg.tie_output,
        "pad_token_id": pad_id,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "forced_eos_token_id": eos_id,
        "decoder_start_token_id": bos_id,
    }


def model_config_from_marian(hf_config: Any, state: dict[str, Tensor] | None = None) -> ModelConfig:
    """Our ModelConfig for a `transformers.MarianConfig` (refuses what we cannot express).

    With the model's `state`, which tables are one and whether there is a logits bias are read
    from the weights: transformers 5 ties encoder, decoder and output tables only with
    `tie_word_embeddings`, so a config that shares them may hold three different ones, and
    most final_logits_bias of converted models are zero. Without it, from the config (and an
    output bias, which computes the same function either way).
    """
    check_marian_config(hf_config)
    if state is None:
        share = hf_config.share_encoder_decoder_embeddings
        tie, output_bias = hf_config.tie_word_embeddings, True
    else:
        encoder, decoder = "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"
        share = same_tensor(state, encoder, decoder)
        tie = same_tensor(state, "lm_head.weight", decoder)
        bias = state.get("final_logits_bias")
        output_bias = bias is not None and bool(bias.any())
    return ModelConfig(
        **stack_settings(hf_config),
        share_embeddings=share,
        tie_output=tie,
        output_bias=output_bias,
    )


def from_marian_weights(hf_config: Any, state: dict[str, Tensor]) -> ConvertedModel:
    """Our config and weights for a Marian model's config and state dict (no transformers
    needed: `state` may come from a checkpoint file)."""
    cfg = model_config_from_marian(hf_config, state)
    tgt_vocab_size = state["lm_head.weight"].size(0)
    return ConvertedModel(
        cfg,
        from_marian_state_dict(state, cfg),
        src_vocab_size=state["model.encoder.embed_tokens.weight"].size(0),
        tgt_vocab_size=tgt_vocab_size,
        pad_id=hf_config.pad_token_id,
    )


def to_marian(model: Seq2SeqTransformer, bos_id: int, eos_id: int) -> Any:
    """A `transformers.MarianMTModel` computing the same function as `model`, its decoder
    started from `bos_id` and its sentences ended by `eos_id` (the checkpoint's special ids:
    there is no default that fits every model)."""
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
    return from_marian_weights(hf_model.config, hf_model.state_dict()).build()
