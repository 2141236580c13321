"""Weight mapping between our model and Hugging Face `M2M100ForConditionalGeneration`, the
architecture of M2M100 and NLLB-200.

M2M100 is fairseq's pre-norm Transformer: a LayerNorm before every sub-layer and one at the end
of each stack (`encoder.layer_norm`, `decoder.layer_norm`: our final_norm), LayerNorms of eps
1e-5, biased projections, one token table for encoder, decoder and output (tied with
`tie_word_embeddings`), embeddings scaled by sqrt(d_model) when `scale_embedding` (NLLB:
true), no logits bias. Its sinusoidal positions are fairseq's: frequencies 10000^(-i/(D/2-1))
in the [sin | cos] layout, computed in float32, numbered from padding id + 1, pad tokens
given a zero vector. A full pass numbers a token padding id + its count among the non-pad
tokens, a cached step cache length + padding id + 1: for right-padded batches (ours), both
are our `positions: sinusoidal_fairseq` (which gives pad tokens no position too) with
`position_offset: pad + 1`. Only a pad *inside* a sequence, which our batches never hold,
would number the tokens after it differently. The layer names are Marian's
(`hf_bart.layer_name_pairs`); `m2m100_limits` lists the options of ours that M2M100 can hold.

The state-dict conversion works on plain dicts, so the core never imports transformers; only
`to_m2m100` / `from_m2m100`, which build or read the transformers model, import it.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from transformer_mt.config import ModelConfig
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

# Keys of older BART-family configs that M2M100's code ignores: the value it computes, and
# what another value would ask for (MBart's layernorm_embedding is the likeliest to meet).
_M2M100_LEGACY_KEYS = {
    "normalize_before": (True, "post-norm layers; M2M100 is pre-norm"),
    "add_final_layer_norm": (True, "no final LayerNorm; M2M100 has one per stack"),
    "normalize_embedding": (False, "a LayerNorm on the embeddings; M2M100 has none"),
    "layernorm_embedding": (False, "MBart's LayerNorm on the embeddings; M2M100 has none"),
    "static_position_embeddings": (True, "learned positions; M2M100's are sinusoidal"),
    "add_bias_logits": (False, "a logits bias; M2M100 has none"),
}

# The SentencePiece model's name in NLLB's and M2M100's directories (import and export).
SPM_FILE = "sentencepiece.bpe.model"
_ENCODER_EMBEDDING = "model.encoder.embed_tokens.weight"
_DECODER_EMBEDDING = "model.decoder.embed_tokens.weight"


def check_m2m100_config(hf_config: Any) -> None:
    """Raise `UnsupportedConfig` naming every key of a `transformers.M2M100Config` whose value
    we cannot compute.

    `encoder_layerdrop` / `decoder_layerdrop` (0.05 in M2M100's configs) are accepted:
    LayerDrop skips layers only in training (`hf_bart.ignored_settings` lists them).
    """
    problems = config_problems(hf_config, "m2m_100", _M2M100_LEGACY_KEYS)
    pad = hf_config.pad_token_id
    if pad is None:
        problems.append(("pad_token_id", "pad_token_id=None (M2M100 numbers positions from it)"))
    elif hf_config.decoder_start_token_id == pad:
        problems.append(
            (
                "decoder_start_token_id",
                f"decoder_start_token_id={pad} is pad_token_id: M2M100 gives pad tokens no "
                "position number, ours number every token",
            )
        )
    if problems:
        raise UnsupportedConfig("M2M100", problems)


def m2m100_limits(pad_id: int) -> FormatLimits:
    """What of ours M2M100 can hold, for a model whose pad id is `pad_id`: M2M100 numbers
    positions from the pad id + 1, so one option's only value depends on the model."""
    first = pad_id + 1
    return FormatLimits(
        "cannot map to Hugging Face M2M100",
        {
            "pre_norm": Limit((True,), "M2M100 is pre-norm"),
            "layer_norm_eps": Limit((LAYER_NORM_EPS,), "M2M100's is fixed at 1e-5"),
            "positions": Limit(("sinusoidal_fairseq",), "M2M100 has sinusoidal_fairseq only"),
            "position_offset": Limit(
                (first,), f"M2M100 numbers positions from the pad id + 1 = {first}"
            ),
            "activation": Limit(
                tuple(sorted(set(HF_ACTIVATIONS.values()))), "M2M100 has no gated feed-forward"
            ),
            "share_embeddings": Limit((True,), "M2M100 has one token table"),
            "output_bias": Limit((False,), "M2M100 has no logits bias"),
            "n_kv_heads": Limit(
                lambda cfg: cfg.kv_heads == cfg.n_heads, "M2M100 has one per query head"
            ),
            "attention_pattern": Limit(("full",), "M2M100 has full"),
            "attention": Limit(("mha",), "M2M100 has standard attention"),
        },
    )


def _final_norm_pairs() -> list[tuple[str, str]]:
    return [
        (f"{side}.final_norm.{param}", f"model.{side}.layer_norm.{param}")
        for side in ("encoder", "decoder")
        for param in ("weight", "bias")
    ]


def to_m2m100_state_dict(model: Seq2SeqTransformer) -> dict[str, Tensor]:
    """Our parameters under M2M100's names (its positions are a buffer it computes)."""
    check_expressible(m2m100_limits(model.pad_id), model.cfg)
    ours = model.state_dict()
    pairs = layer_name_pairs(model.cfg) + _final_norm_pairs()
    out = {theirs: ours[name].clone() for name, theirs in pairs}
    embedding = ours["encoder.embed.token_embedding.weight"]
    for key in ("model.shared.weight", _ENCODER_EMBEDDING, _DECODER_EMBEDDING):
        out[key] = embedding.clone()
    out["lm_head.weight"] = ours["output_projection.weight"].clone()
    return out


def from_m2m100_state_dict(state: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """M2M100's parameters under our names, ready for `load_state_dict(strict=True)`."""
    pairs = layer_name_pairs(cfg) + _final_norm_pairs()
    out = {name: state[theirs].clone() for name, theirs in pairs}
    out["encoder.embed.token_embedding.weight"] = state[_ENCODER_EMBEDDING].clone()
    out["decoder.embed.token_embedding.weight"] = state[_DECODER_EMBEDDING].clone()
    out["output_projection.weight"] = state["lm_head.weight"].clone()
    return out


def m2m100_config_kwargs(
    cfg: ModelConfig, vocab_size: int, pad_id: int, bos_id: int, eos_id: int
) -> dict[str, Any]:
    """Keyword arguments of `transformers.M2M100Config` for an equivalent model."""
    check_expressible(m2m100_limits(pad_id), cfg)
    return {
        "vocab_size": vocab_size,
        **stack_config_kwargs(cfg),
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "tie_word_embeddings": cfg.tie_output,
        "pad_token_id": pad_id,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "decoder_start_token_id": bos_id,
    }


def model_config_from_m2m100(hf_config: Any, state: dict[str, Tensor] | None = None) -> ModelConfig:
    """Our ModelConfig for a `transformers.M2M100Config` (refuses what we cannot express).

    With the model's `state`, whether encoder, decoder and output share one table is read
    from the weights (transformers 5 ties them only with `tie_word_embeddings`; without it a
    fresh model holds three); without it, from `tie_word_embeddings`.
    """
    check_m2m100_config(hf_config)
    if state is None:
        share = tie = hf_config.tie_word_embeddings
    else:
        share = same_tensor(state, _ENCODER_EMBEDDING, _DECODER_EMBEDDING)
        tie = same_tensor(state, "lm_head.weight", _DECODER_EMBEDDING)
    return ModelConfig(
        **stack_settings(hf_config),
        pre_norm=True,
        positions="sinusoidal_fairseq",
        position_offset=hf_config.pad_token_id + 1,
        share_embeddings=share,
        tie_output=tie,
        layer_norm_eps=LAYER_NORM_EPS,
    )


def from_m2m100_weights(hf_config: Any, state: dict[str, Tensor]) -> ConvertedModel:
    """Our config and weights for an M2M100 model's config and state dict (no transformers
    needed: `state` may come from a checkpoint file)."""
    cfg = model_config_from_m2m100(hf_config, state)
    return ConvertedModel(
        cfg,
        from_m2m100_state_dict(state, cfg),
        src_vocab_size=state[_ENCODER_EMBEDDING].size(0),
        tgt_vocab_size=state["lm_head.weight"].size(0),
        pad_id=hf_config.pad_token_id,
    )


def to_m2m100(model: Seq2SeqTransformer, bos_id: int, eos_id: int) -> Any:
    """A `transformers.M2M100ForConditionalGeneration` computing the same function as `model`
    (its decoder starts from `bos_id`, as ours)."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    vocab_size = model.output_projection.weight.size(0)
    kwargs = m2m100_config_kwargs(model.cfg, vocab_size, model.pad_id, bos_id, eos_id)
    hf_model = M2M100ForConditionalGeneration(M2M100Config(**kwargs))
    hf_model.load_state_dict(to_m2m100_state_dict(model), strict=True)
    return hf_model.eval()


def from_m2m100(hf_model: Any) -> Seq2SeqTransformer:
    """Our model with the weights of a `transformers.M2M100ForConditionalGeneration`."""
    return from_m2m100_weights(hf_model.config, hf_model.state_dict()).build()
