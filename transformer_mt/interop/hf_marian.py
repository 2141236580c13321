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
layer names (`hf_bart.py`); `MARIAN` lists the options of ours that Marian can hold.

Keys of older (BART-era) configs that transformers reads no more (`normalize_before`,
`normalize_embedding`, ...) are checked too: a value that describes another network than the
one transformers (and we) compute is refused by name.

The state-dict conversion works on plain dicts, so the core never imports transformers; only
`to_marian` / `from_marian`, which build or read a `MarianMTModel`, import it (extra `hf`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from transformer_mt.config import ModelConfig
from transformer_mt.errors import TmtError
from transformer_mt.interop.hf_bart import (
    HF_ACTIVATIONS,
    LAYER_NORM_EPS,
    ConvertedModel,
    UnsupportedConfig,
    config_problems,
    layer_name_pairs,
    same_tensor,
    stack_config_kwargs,
    stack_settings,
)
from transformer_mt.interop.limits import FormatLimits, Limit, check_expressible
from transformer_mt.model import Seq2SeqTransformer
from transformer_mt.model.embeddings import sinusoidal_table

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


# What of ours Marian can hold: its code fixes what our options choose.
MARIAN = FormatLimits(
    "cannot map to Hugging Face Marian",
    {
        "layer_norm_eps": Limit((LAYER_NORM_EPS,), "Marian's LayerNorm eps is fixed at 1e-5"),
        "pre_norm": Limit((False,), "Marian is post-norm"),
        "positions": Limit(("sinusoidal",), "Marian has sinusoidal only"),
        "position_offset": Limit((0,), "Marian numbers positions from 0"),
        "activation": Limit(
            tuple(sorted(set(HF_ACTIVATIONS.values()))), "Marian has no gated feed-forward"
        ),
        "n_kv_heads": Limit(
            lambda cfg: cfg.kv_heads == cfg.n_heads,
            "Marian has one key/value head per query head",
        ),
        "attention_pattern": Limit(("full",), "Marian attends to every position"),
        "attention": Limit(("mha",), "Marian has standard attention only"),
    },
)


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


def to_marian_state_dict(model: Seq2SeqTransformer) -> dict[str, Tensor]:
    """Our parameters under Marian's names (positions and final_logits_bias included: our
    output bias, or zeros without one).

    `model.shared` exists in Marian only when it shares one table between encoder and decoder.
    """
    check_expressible(MARIAN, model.cfg)
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
    may carry its own; transformers then uses them).

    A table stored in float16 or bfloat16 holds our sinusoids rounded to its precision: a
    value in [-1, 1] moves by at most half its dtype's eps (float16: 2.4e-4), so the
    tolerance is that eps, and a table that is not sinusoidal still differs by far more.
    """
    ours = sinusoidal_table(cfg.max_positions, cfg.d_model)
    for side in ("encoder", "decoder"):
        key = f"model.{side}.embed_positions.weight"
        table = state.get(key)
        if table is None:
            continue
        atol = torch.finfo(table.dtype).eps
        if table.shape != ours.shape or not torch.allclose(table.float(), ours, atol=atol):
            raise TmtError(f"cannot map from Marian: {key} is not the sinusoidal table")


def from_marian_state_dict(state: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Marian's parameters under our names, ready for `load_state_dict(strict=True)`."""
    check_expressible(MARIAN, cfg)
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


def marian_config_kwargs(
    cfg: ModelConfig,
    src_vocab_size: int,
    tgt_vocab_size: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
) -> dict[str, Any]:
    """Keyword arguments of `transformers.MarianConfig` for an equivalent model."""
    check_expressible(MARIAN, cfg)
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
