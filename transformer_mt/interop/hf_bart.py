"""What the Hugging Face Marian and M2M100 mappings share: both are BART-family models.

Their layers carry the same names (`layer_name_pairs`), their configs size the two stacks with
the same keys (`stack_config_kwargs`, `stack_settings`) and are refused by the same rules
(`config_problems`), their LayerNorms use nn.LayerNorm's eps and their activations are
transformers' `ACT2FN` names. `hf_marian.py` and `hf_m2m100.py` add what differs: norms,
positions, embeddings and the `ModelConfig` values each can express.
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
LAYER_NORM_EPS = 1e-5

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


def ignored_settings(hf_config: Any) -> list[str]:
    """Settings of a Marian or M2M100 config that act in training only and that our model
    leaves out, as "key=value (why)": nothing a translation depends on."""
    notes = []
    for key in ("encoder_layerdrop", "decoder_layerdrop"):
        value = getattr(hf_config, key, 0)
        if value:
            notes.append(f"{key}={value} (LayerDrop skips layers in training only; ours has none)")
    return notes


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
