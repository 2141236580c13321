"""ModelConfig: the Transformer's dimensions and options, and the rules between them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from transformer_mt.config.checks import check_positive, check_unit_interval
from transformer_mt.config.errors import ConfigError

# Layers of a stack, at most. The deepest Transformers trained (DeepNet, Wang et al. 2022) have
# 1,000 layers in all; a deeper stack is a typo, and building one fails in Python's allocator.
MAX_LAYERS = 1024
# Widths (d_model, d_ff) and positions, at most: over 20x GPT-3's d_ff (49,152); a wider one is
# a typo, and torch cannot size its tensors past int64.
MAX_WIDTH = 1 << 20


@dataclass(frozen=True)
class ModelConfig:
    """Transformer encoder-decoder dimensions and options (Vaswani et al., 2017, section 3)."""

    d_model: int = 512  # width of embeddings and every sub-layer output
    n_heads: int = 8  # attention heads; d_model must divide evenly
    n_layers: int = 6  # encoder layers (and decoder layers unless n_decoder_layers is set)
    n_decoder_layers: int | None = None  # None: same as n_layers
    d_ff: int = 2048  # inner size of the position-wise feed-forward network
    dropout: float = 0.1  # on embeddings+positions and every sub-layer output (paper 5.4)
    attn_dropout: float = 0.0  # on attention weights (tensor2tensor / fairseq option)
    activation_dropout: float = 0.0  # on the feed-forward hidden activation
    # Feed-forward activation: relu as in the paper; gelu is the exact (erf) GELU; swish is
    # x * sigmoid(x) (SiLU), the activation of most OPUS-MT Marian models; swiglu is gated.
    activation: Literal["relu", "gelu", "swish", "swiglu"] = "relu"
    pre_norm: bool = False  # False: paper's post-norm; True: pre-norm with a final LayerNorm
    # sinusoidal/learned: absolute positions added to the embeddings. The others add none and
    # act in encoder and decoder self-attention (model/rope.py, model/relative.py): rope
    # rotates queries and keys by position (Su et al. 2021); shaw adds learned embeddings of
    # the clipped distance to the keys (Shaw et al. 2018); t5 adds a learned per-head bias per
    # distance bucket (Raffel et al. 2020); alibi adds -slope_h * distance (Press et al. 2022).
    # sinusoidal_fairseq: sinusoids of frequencies 10000^(-i/(D/2-1)) (tensor2tensor, fairseq,
    # M2M100/NLLB) instead of the paper's 10000^(-i/(D/2)) (sinusoidal, as Marian), and pad
    # tokens get none, as in fairseq (only their own outputs change, which nothing reads).
    positions: Literal[
        "sinusoidal", "sinusoidal_fairseq", "learned", "rope", "shaw", "t5", "alibi"
    ] = "sinusoidal"
    # Sinusoidal positions: the position number of the first token. fairseq and M2M100/NLLB
    # number tokens from padding id + 1 (2 with their pad id 1); 0 is the paper and Marian.
    position_offset: int = 0
    # Longest sequence the model takes (positional tables; truncation and decoding caps).
    max_positions: int = 1024
    # Multiply token embeddings by sqrt(d_model) (paper 3.4). Off for models trained without it
    # (Hugging Face configs with scale_embedding: false).
    scale_embeddings: bool = True
    max_relative_position: int = 16  # shaw: distances are clipped to [-k, k] (paper's k)
    relative_values: bool = False  # shaw: also add distance embeddings to the values
    relative_buckets: int = 32  # t5: distance buckets (the encoder gives half to each side)
    relative_max_distance: int = 128  # t5: distances from here on share the last bucket
    share_embeddings: bool = True  # one embedding table for source and target (joint vocab)
    tie_output: bool = True  # output projection shares the target embedding matrix
    # A learned bias added to the output logits: Marian's final_logits_bias (OPUS-MT models
    # carry a non-zero one). Off by default, so checkpoints without it load unchanged.
    output_bias: bool = False
    layer_norm_eps: float = 1e-5
    # Key/value heads of self- and cross-attention; groups of n_heads / n_kv_heads query heads
    # share one (GQA, Ainslie et al. 2023; 1 = multi-query). None: n_heads (standard MHA).
    # The decoding cache holds only these heads, so its memory shrinks by the same factor.
    n_kv_heads: int | None = None
    # Encoder and decoder self-attention keys each query may see (cross-attention stays full):
    # local = distance <= attention_window; dilated = distance a multiple of attention_dilation
    # (itself included); local_dilated = either. The decoder stays causal in every pattern.
    attention_pattern: Literal["full", "local", "dilated", "local_dilated"] = "full"
    attention_window: int = 16  # local patterns: each side's reach, in tokens
    attention_dilation: int = 8  # dilated patterns: the stride between attended keys
    # sdpa: every pattern as a dense mask (hidden scores are computed, then discarded);
    # flex: torch flex_attention block masks skip hidden blocks, so local patterns do less
    # work on long inputs. Compiled on CUDA; needs attn_dropout 0 (flex has no dropout).
    attention_backend: Literal["sdpa", "flex"] = "sdpa"
    # mha: standard attention (grouped with n_kv_heads). mla: multi-head latent attention
    # (DeepSeek-V2, model/latent.py) in decoder self-attention: every head's keys and values
    # are up-projected from one latent of size mla_kv_rank per token, all the cache holds.
    attention: Literal["mha", "mla"] = "mha"
    # mla: latent size r. None: 4 head sizes, DeepSeek-V2's d_c = 4 d_h: at the default sizes
    # the cache holds 256 numbers per token and layer (272 with rope) instead of MHA's 1024.
    mla_kv_rank: int | None = None
    mla_rope_dim: int = 16  # mla with positions rope: size of the decoupled rotary key/query
    # mla: also in encoder self-attention. Off by default: the encoder keeps no decoding cache
    # to shrink.
    mla_encoder: bool = False

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def kv_rank(self) -> int:
        """MLA's latent size r: mla_kv_rank, or 4 head sizes."""
        return 4 * (self.d_model // self.n_heads) if self.mla_kv_rank is None else self.mla_kv_rank

    @property
    def latent_rope_dim(self) -> int:
        """MLA's decoupled rotary size d_R: mla_rope_dim with positions rope, else 0."""
        return self.mla_rope_dim if self.positions == "rope" else 0

    @property
    def relative_positions(self) -> bool:
        """Whether positions enter self-attention scores as relative terms (shaw, t5, alibi)."""
        return self.positions in ("shaw", "t5", "alibi")

    @property
    def self_attention_cache_layout(self) -> tuple[int, int, bool]:
        """What the decoder's self-attention cache holds per position and layer, as (heads,
        size, keys_only): mha a key and a value per kv head, (Hkv, Dh, False); mla one
        latent and rotary key [c ‖ k^R] read as keys and values, (1, r + d_R, True)."""
        if self.attention == "mla":
            return 1, self.kv_rank + self.latent_rope_dim, True
        return self.kv_heads, self.d_model // self.n_heads, False

    def self_attention_cache_bytes(self, element_size: int = 4) -> int:
        """Bytes the decoder's self-attention cache holds per target token of one hypothesis,
        all layers together, at `element_size` bytes a number (4: float32, 2: bfloat16):
            mha: layers x 2 x Hkv x Dh x element_size   (a key and a value per kv head)
            mla: layers x (r + d_R) x element_size      (the latent and the rotary key)
        Cross-attention keys and values are per source token and not counted."""
        heads, size, keys_only = self.self_attention_cache_layout
        per_layer = (1 if keys_only else 2) * heads * size
        return self.decoder_layers * per_layer * element_size

    def validate(self) -> None:
        check_positive(self, "model", ["d_model", "n_heads", "d_ff", "max_positions"])
        # Each sizes a weight or a table: past MAX_WIDTH, the memory check would blame the
        # widths and layers the user did not set (97e9 parameters from mla_kv_rank 1e9).
        sizes = ("d_model", "d_ff", "max_positions", "max_relative_position", "relative_buckets")
        for key in (*sizes, "mla_kv_rank", "mla_rope_dim"):
            value = getattr(self, key)
            if value is not None and value > MAX_WIDTH:
                raise ConfigError(
                    f"model.{key}={value} must be in [1, {MAX_WIDTH}]", keys=(f"model.{key}",)
                )
        if not self.layer_norm_eps > 0:  # also NaN
            raise ConfigError(
                f"model.layer_norm_eps={self.layer_norm_eps:g} must be > 0 (LayerNorm divides "
                "by the square root of the variance plus it: at 0 a padded row of zeros is "
                "0 / 0, and the NaN spreads)",
                keys=("model.layer_norm_eps",),
            )
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.d_model={self.d_model} is not divisible by model.n_heads={self.n_heads}",
                keys=("model.d_model", "model.n_heads"),
            )
        for key, layers in (("n_layers", self.n_layers), ("n_decoder_layers", self.decoder_layers)):
            if not 1 <= layers <= MAX_LAYERS:
                raise ConfigError(
                    f"model.{key}={layers} must be in [1, {MAX_LAYERS}]", keys=(f"model.{key}",)
                )
        check_unit_interval(self, "model", ["dropout", "attn_dropout", "activation_dropout"])
        self._check_sinusoidal()
        if self.positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise ConfigError(
                f"model.positions=rope needs an even head size, got model.d_model / model.n_heads"
                f" = {self.d_model // self.n_heads}",
                keys=("model.positions", "model.d_model", "model.n_heads"),
            )
        self._check_relative()
        self._check_latent()
        self._check_attention()

    def check_read(self) -> None:
        """Refuse a key set away from its default where nothing reads it (the window of full
        attention, t5's buckets with rope positions): the run trained another model than the
        config said, without a word, and a later config without the key was refused as
        another model's. Asked of a config a user writes (`load_config`), not of a
        checkpoint's copy, so that the models trained before the rule still load."""
        patterns = self.attention_pattern
        readers = {
            "attention_window": (
                patterns in ("local", "local_dilated"),
                "model.attention_pattern local or local_dilated",
            ),
            "attention_dilation": (
                patterns in ("dilated", "local_dilated"),
                "model.attention_pattern dilated or local_dilated",
            ),
            "max_relative_position": (self.positions == "shaw", "model.positions=shaw"),
            "relative_buckets": (self.positions == "t5", "model.positions=t5"),
            "relative_max_distance": (self.positions == "t5", "model.positions=t5"),
            "mla_rope_dim": (
                self.attention == "mla" and self.positions == "rope",
                "model.attention=mla with model.positions=rope",
            ),
        }
        defaults = {field.name: field.default for field in dataclasses.fields(self)}
        for key, (read, needs) in readers.items():
            value = getattr(self, key)
            if not read and value != defaults[key]:
                raise ConfigError(
                    f"model.{key}={value} needs {needs}; nothing reads it in this model",
                    keys=(f"model.{key}",),
                )

    def _check_sinusoidal(self) -> None:
        """Check the keys of the sinusoidal position options (see `positions`)."""
        sinusoidal = self.positions in ("sinusoidal", "sinusoidal_fairseq")
        if sinusoidal and self.d_model % 2:
            raise ConfigError(
                f"model.d_model={self.d_model} must be even for sinusoidal positions",
                keys=("model.d_model",),
            )
        if self.positions == "sinusoidal_fairseq" and self.d_model < 4:
            raise ConfigError(
                f"model.d_model={self.d_model} must be >= 4 for positions sinusoidal_fairseq "
                "(its frequencies divide by d_model / 2 - 1)",
                keys=("model.d_model", "model.positions"),
            )
        if not 0 <= self.position_offset <= MAX_WIDTH:
            raise ConfigError(
                f"model.position_offset={self.position_offset} must be in [0, {MAX_WIDTH}]",
                keys=("model.position_offset",),
            )
        if self.position_offset and not sinusoidal:
            raise ConfigError(
                f"model.position_offset={self.position_offset} needs sinusoidal positions, "
                f"not model.positions={self.positions}",
                keys=("model.position_offset", "model.positions"),
            )

    def _check_relative(self) -> None:
        """Check the keys of the relative position options (see `positions`)."""
        check_positive(self, "model", ["max_relative_position"])
        if self.relative_values and self.positions != "shaw":
            raise ConfigError(
                f"model.relative_values needs model.positions=shaw, not {self.positions}",
                keys=("model.relative_values", "model.positions"),
            )
        if self.relative_buckets < 4 or self.relative_buckets % 2:
            raise ConfigError(
                f"model.relative_buckets={self.relative_buckets} must be even and >= 4 (the "
                "encoder gives half to each direction, and half of those to exact distances)",
                keys=("model.relative_buckets",),
            )
        if self.relative_max_distance <= self.relative_buckets // 2:
            raise ConfigError(
                f"model.relative_max_distance={self.relative_max_distance} must be above "
                f"model.relative_buckets / 2 = {self.relative_buckets // 2} (the distances "
                "that get a bucket each)",
                keys=("model.relative_max_distance", "model.relative_buckets"),
            )

    def _check_latent(self) -> None:
        """Check the keys of multi-head latent attention (see `attention`)."""
        if self.attention != "mla":
            if self.mla_encoder or self.mla_kv_rank is not None:
                key = "mla_encoder" if self.mla_encoder else "mla_kv_rank"
                raise ConfigError(
                    f"model.{key} needs model.attention=mla, not {self.attention}",
                    keys=(f"model.{key}", "model.attention"),
                )
            return
        if self.mla_kv_rank is not None and self.mla_kv_rank < 1:
            raise ConfigError(
                f"model.mla_kv_rank={self.mla_kv_rank} must be >= 1 (null: 4 head sizes)",
                keys=("model.mla_kv_rank",),
            )
        if self.positions == "rope" and (self.mla_rope_dim < 2 or self.mla_rope_dim % 2):
            raise ConfigError(
                f"model.mla_rope_dim={self.mla_rope_dim} must be even and >= 2 (rotary "
                "positions turn pairs of features)",
                keys=("model.mla_rope_dim",),
            )
        if self.n_kv_heads is not None:
            raise ConfigError(
                f"model.attention=mla does not take model.n_kv_heads={self.n_kv_heads} (every "
                "head reads the one shared latent already)",
                keys=("model.attention", "model.n_kv_heads"),
            )
        if self.positions == "shaw":
            raise ConfigError(
                "model.attention=mla does not take model.positions=shaw (latent attention has "
                "no Shaw terms); use rope, t5 or alibi",
                keys=("model.attention", "model.positions"),
            )

    def _check_attention(self) -> None:
        """Check the keys of grouped heads, attention patterns and the attention backend."""
        if self.n_kv_heads is not None and (self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads):
            raise ConfigError(
                f"model.n_kv_heads={self.n_kv_heads} must be >= 1 and divide "
                f"model.n_heads={self.n_heads} (1: multi-query; null: same as n_heads)",
                keys=("model.n_kv_heads", "model.n_heads"),
            )
        if self.attention_window < 1:
            raise ConfigError(
                f"model.attention_window={self.attention_window} must be >= 1",
                keys=("model.attention_window",),
            )
        if self.attention_dilation < 2:
            raise ConfigError(
                f"model.attention_dilation={self.attention_dilation} must be >= 2 "
                "(1 would attend everywhere: use model.attention_pattern: full)",
                keys=("model.attention_dilation",),
            )
        if self.attention_backend == "flex":
            _check_flex(self.attn_dropout)
            if self.relative_values:
                raise ConfigError(
                    "model.attention_backend=flex does not take model.relative_values=true "
                    "(Shaw's value term needs the attention weights, which flex does not "
                    "return); use sdpa",
                    keys=("model.attention_backend", "model.relative_values"),
                )


def _check_flex(attn_dropout: float) -> None:
    """Refuse flex attention where it cannot run: with attention dropout, or torch < 2.5."""
    if attn_dropout > 0:
        raise ConfigError(
            f"model.attention_backend=flex needs model.attn_dropout=0 (got {attn_dropout}): "
            "flex attention has no dropout on attention weights",
            keys=("model.attention_backend", "model.attn_dropout"),
        )
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            "model.attention_backend=flex needs torch >= 2.5 (torch.nn.attention.flex_attention)",
            keys=("model.attention_backend",),
        ) from err
