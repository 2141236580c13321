"""Typed experiment configuration, loaded strictly from YAML.

Every default lives in one dataclass field, with a comment on what it does and, where it is
not obvious, why. A YAML file holds one experiment's overrides; `--set key=value` overrides go
through the same door, so a typo on the command line fails like a typo in the file:

    train.warmup_step: unknown key (did you mean 'warmup_steps'?) [in configs/x.yaml]
    train.lr: expected a number, got 'abc' [override 'train.lr=abc']
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Iterable, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from transformer_mt.errors import SettingError, TmtError, one_line


class ConfigError(TmtError, ValueError):
    """A config file or override is wrong; the message is one line naming the dotted key."""


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
        _positive(self, "model", ["d_model", "n_heads", "n_layers", "d_ff", "max_positions"])
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.d_model={self.d_model} is not divisible by model.n_heads={self.n_heads}"
            )
        if self.n_decoder_layers is not None and self.n_decoder_layers < 1:
            raise ConfigError(f"model.n_decoder_layers={self.n_decoder_layers} must be >= 1")
        _unit_interval(self, "model", ["dropout", "attn_dropout", "activation_dropout"])
        self._check_sinusoidal()
        if self.positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise ConfigError(
                f"model.positions=rope needs an even head size, got model.d_model / model.n_heads"
                f" = {self.d_model // self.n_heads}"
            )
        self._check_relative()
        self._check_latent()
        if self.n_kv_heads is not None and (self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads):
            raise ConfigError(
                f"model.n_kv_heads={self.n_kv_heads} must be >= 1 and divide "
                f"model.n_heads={self.n_heads} (1: multi-query; null: same as n_heads)"
            )
        if self.attention_window < 1:
            raise ConfigError(f"model.attention_window={self.attention_window} must be >= 1")
        if self.attention_dilation < 2:
            raise ConfigError(
                f"model.attention_dilation={self.attention_dilation} must be >= 2 "
                "(1 would attend everywhere: use model.attention_pattern: full)"
            )
        if self.attention_backend == "flex":
            _check_flex(self.attn_dropout)
            if self.relative_values:
                raise ConfigError(
                    "model.attention_backend=flex does not take model.relative_values=true "
                    "(Shaw's value term needs the attention weights, which flex does not "
                    "return); use sdpa"
                )

    def _check_sinusoidal(self) -> None:
        """Check the keys of the sinusoidal position options (see `positions`)."""
        sinusoidal = self.positions in ("sinusoidal", "sinusoidal_fairseq")
        if sinusoidal and self.d_model % 2:
            raise ConfigError(f"model.d_model={self.d_model} must be even for sinusoidal positions")
        if self.positions == "sinusoidal_fairseq" and self.d_model < 4:
            raise ConfigError(
                f"model.d_model={self.d_model} must be >= 4 for positions sinusoidal_fairseq "
                "(its frequencies divide by d_model / 2 - 1)"
            )
        if self.position_offset < 0:
            raise ConfigError(f"model.position_offset={self.position_offset} must be >= 0")
        if self.position_offset and not sinusoidal:
            raise ConfigError(
                f"model.position_offset={self.position_offset} needs sinusoidal positions, "
                f"not model.positions={self.positions}"
            )

    def _check_relative(self) -> None:
        """Check the keys of the relative position options (see `positions`)."""
        _positive(self, "model", ["max_relative_position"])
        if self.relative_values and self.positions != "shaw":
            raise ConfigError(
                f"model.relative_values needs model.positions=shaw, not {self.positions}"
            )
        if self.relative_buckets < 4 or self.relative_buckets % 2:
            raise ConfigError(
                f"model.relative_buckets={self.relative_buckets} must be even and >= 4 (the "
                "encoder gives half to each direction, and half of those to exact distances)"
            )
        if self.relative_max_distance <= self.relative_buckets // 2:
            raise ConfigError(
                f"model.relative_max_distance={self.relative_max_distance} must be above "
                f"model.relative_buckets / 2 = {self.relative_buckets // 2} (the distances "
                "that get a bucket each)"
            )

    def _check_latent(self) -> None:
        """Check the keys of multi-head latent attention (see `attention`)."""
        if self.attention != "mla":
            if self.mla_encoder or self.mla_kv_rank is not None:
                key = "mla_encoder" if self.mla_encoder else "mla_kv_rank"
                raise ConfigError(f"model.{key} needs model.attention=mla, not {self.attention}")
            return
        if self.mla_kv_rank is not None and self.mla_kv_rank < 1:
            raise ConfigError(
                f"model.mla_kv_rank={self.mla_kv_rank} must be >= 1 (null: 4 head sizes)"
            )
        if self.positions == "rope" and (self.mla_rope_dim < 2 or self.mla_rope_dim % 2):
            raise ConfigError(
                f"model.mla_rope_dim={self.mla_rope_dim} must be even and >= 2 (rotary "
                "positions turn pairs of features)"
            )
        if self.n_kv_heads is not None:
            raise ConfigError(
                f"model.attention=mla does not take model.n_kv_heads={self.n_kv_heads} (every "
                "head reads the one shared latent already)"
            )
        if self.positions == "shaw":
            raise ConfigError(
                "model.attention=mla does not take model.positions=shaw (latent attention has "
                "no Shaw terms); use rope, t5 or alibi"
            )


def _check_flex(attn_dropout: float) -> None:
    if attn_dropout > 0:
        raise ConfigError(
            f"model.attention_backend=flex needs model.attn_dropout=0 (got {attn_dropout}): "
            "flex attention has no dropout on attention weights"
        )
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            "model.attention_backend=flex needs torch >= 2.5 (torch.nn.attention.flex_attention)"
        ) from err


@dataclass(frozen=True)
class TrainSource:
    """One of several training corpora mixed by weight (`data.train` as a list).

    Read like a single `data.train` (same `format`), in its own direction when it names one:
    sources in several directions train one multilingual model (`tokenizer.language_tags`).
    The training stream takes its next pair from source k with probability p_k (weight_k /
    sum of weights, or tempered by `data.temperature`); a source that runs out starts again,
    and an epoch ends once every source has been read to its end (data/mixing.py).
    """

    path: str  # what a single data.train names: a path prefix (text), a file, a hub split
    weight: float = 1.0  # mixing proportion; only the ratios between sources count
    src_lang: str | None = None  # this source's direction (None: data.src_lang)
    tgt_lang: str | None = None  # (None: data.tgt_lang)


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel corpus lives and how training pairs are cleaned.

    `format` decides what `train`/`valid`/`test` mean:
      - text:  a path prefix; the files are `{prefix}.{src_lang}` and `{prefix}.{tgt_lang}`
      - tsv:   one file, source TAB target per line
      - jsonl: one file of {"translation": {src_lang: ..., tgt_lang: ...}} lines (hub layout)
      - hub:   a split name of the `datasets` hub dataset `hub_name` / `hub_config` (online)
    `train` may also be a list of `TrainSource`s (`{path: ..., weight: ...}` in YAML), mixed
    into one training stream by weight; each may name its own direction (`src_lang`,
    `tgt_lang`). `src_lang` -> `tgt_lang` is then the direction of `valid` and `test`, and must
    be one of the training directions.
    """

    src_lang: str = "de"
    tgt_lang: str = "en"
    format: Literal["text", "tsv", "jsonl", "hub"] = "text"
    train: str | tuple[TrainSource, ...] = "data/multi30k/train"  # or sources mixed by weight
    valid: str = "data/multi30k/valid"
    test: str | None = "data/multi30k/test2016"
    hub_name: str | None = None  # e.g. "wmt14" (format: hub only)
    hub_config: str | None = None  # e.g. "de-en" (format: hub only)
    # Temperature sampling across training sources (Arivazhagan et al., 2019): source k of
    # n_k pairs is drawn with probability proportional to (weight_k * n_k) ** (1 / T). 1:
    # in proportion to size; larger: flatter, so small directions are seen more. None: the
    # weights alone are the proportions, whatever the sizes.
    temperature: float | None = None
    max_len: int = 256  # training pairs with more tokens on either side are dropped
    max_len_ratio: float = 3.0  # ... and so are pairs whose token-length ratio is above this
    cache_dir: str = "data/cache"  # encoded corpora (Arrow), keyed by corpus + tokenizer hash
    # Read train lazily and tokenize it while training (data/streaming.py) instead of encoding
    # it all in memory first: for corpora that do not fit. Explicit rather than automatic
    # above some size: it changes which pairs share a batch and what a checkpoint records.
    streaming: bool = False
    # streaming: training pairs read, tokenized and batched together (length-sorted, then cut
    # at the token budget, in shuffled order). 20k pairs are some 70 batches of 4096 tokens at
    # Multi30k lengths, enough for padding close to a whole-corpus sort, while their ids stay
    # a few MB per reader.
    shuffle_buffer: int = 20_000
    # streaming: processes per rank that read and tokenize ahead of training (0: the training
    # process does it between updates). The batches do not depend on it.
    workers: int = 1

    def validate(self) -> None:
        if self.src_lang == self.tgt_lang:
            raise ConfigError(f"data.src_lang and data.tgt_lang are both '{self.src_lang}'")
        if self.format == "hub" and not self.hub_name:
            raise ConfigError("data.hub_name is required when data.format is 'hub'")
        _positive(self, "data", ["max_len", "max_len_ratio", "shuffle_buffer"])
        if self.temperature is not None and not 0 < self.temperature < math.inf:
            raise ConfigError(f"data.temperature={self.temperature:g} must be > 0 and finite")
        if self.workers < 0:
            raise ConfigError(f"data.workers={self.workers} must be >= 0")
        self._check_train()

    def _check_train(self) -> None:
        """Refuse a list of training sources that names no corpus or cannot be mixed."""
        if isinstance(self.train, str):
            return
        if not self.train:
            raise ConfigError(
                "data.train: the list of sources is empty; name a corpus, or list {path, weight}s"
            )
        for k, source in enumerate(self.train):
            if not source.path.strip():
                raise ConfigError(f"data.train[{k}].path is empty; name a corpus")
            if not source.weight > 0:  # NaN too
                raise ConfigError(f"data.train[{k}].weight={source.weight:g} must be > 0")
            if math.isinf(source.weight):
                raise ConfigError(f"data.train[{k}].weight={source.weight:g} must be finite")
            src, tgt = self.direction_of(source)
            if src == tgt:
                raise ConfigError(f"data.train[{k}]: src_lang and tgt_lang are both {src!r}")
        trained = [self.direction_of(source) for source in self.train]
        if (self.src_lang, self.tgt_lang) not in trained:
            raise ConfigError(
                f"data.src_lang->data.tgt_lang {self.src_lang}->{self.tgt_lang} (the direction "
                "of valid and test) is not one of data.train's directions ("
                f"{', '.join(dict.fromkeys(f'{s}->{t}' for s, t in trained))})"
            )

    def direction_of(self, source: TrainSource) -> tuple[str, str]:
        """(source language, target language) of one training source."""
        return (source.src_lang or self.src_lang, source.tgt_lang or self.tgt_lang)

    def directions(self) -> tuple[tuple[str, str], ...]:
        """The directions a model of this data translates: (data.src_lang, data.tgt_lang),
        the direction of valid and test, first, then those of the training sources in order
        of appearance. Index d of this tuple is a training pair's direction number."""
        found = [(self.src_lang, self.tgt_lang)]
        if not isinstance(self.train, str):
            found += [self.direction_of(source) for source in self.train]
        return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class TokenizerConfig:
    """SentencePiece subword model trained on the training corpus.

    Special ids are fixed: pad=0, unk=1, bos=2, eos=3 (see data/tokenizer.py).
    """

    model_type: Literal["bpe", "unigram"] = "bpe"
    vocab_size: int = 8000
    joint: bool = True  # one vocabulary for source and target (needed by model.share_embeddings)
    character_coverage: float = 1.0  # 1.0 for Latin scripts; ~0.9995 for CJK; >= 0.98
    input_sentence_size: int = 1_000_000  # sentences sampled for training the tokenizer
    # Language codes whose tag `>>xx<<` is a piece of its own, never split (SentencePiece's
    # user-defined symbols). A model trained with them reads the target language's tag in
    # front of every source (the OPUS-MT convention), so one model can translate into several
    # languages (`tmt translate --tgt-lang`); data.tgt_lang must be one of them.
    language_tags: tuple[str, ...] = ()
    # Text files (one sentence a line) the source (or joint) tokenizer also learns from: e.g.
    # the language a model fine-tuned later will translate from, so its words are not split
    # into characters. The model never trains on them.
    extra_text: tuple[str, ...] = ()
    # BPE-dropout (Provilkov et al., 2020): while training, each merge is skipped with this
    # probability and the training set is re-segmented every epoch, a regulariser for small
    # corpora; validation and translation always use the deterministic segmentation. 0: off.
    bpe_dropout: float = 0.0
    # Which sides BPE-dropout re-segments. On the target it changes what the decoder must
    # predict, which slowed learning to half speed on Multi30k (en-de, 60-minute budget).
    bpe_dropout_sides: Literal["both", "source"] = "both"

    def validate(self) -> None:
        if not 0.0 <= self.bpe_dropout < 1.0:
            raise ConfigError(f"tokenizer.bpe_dropout={self.bpe_dropout} must be in [0, 1)")
        if self.bpe_dropout and self.model_type != "bpe":
            raise ConfigError(
                f"tokenizer.bpe_dropout needs model_type bpe, not {self.model_type!r}"
            )
        if self.vocab_size < 8:
            raise ConfigError(f"tokenizer.vocab_size={self.vocab_size} must be >= 8")
        if self.language_tags and not self.joint:
            raise ConfigError(
                "tokenizer.language_tags needs tokenizer.joint: true (a tag in front of a source "
                "is a target language's, one id on both sides)"
            )
        if not 0.98 <= self.character_coverage <= 1.0:
            raise ConfigError(
                f"tokenizer.character_coverage={self.character_coverage} must be in [0.98, 1] "
                "(the range SentencePiece accepts; 0.9995 suits scripts with many characters)"
            )
        _positive(self, "tokenizer", ["input_sentence_size"])


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, precision, validation and checkpointing."""

    max_steps: int = 100_000  # optimizer updates
    max_epochs: int | None = None  # stop after this many passes as well (None: no limit)
    max_minutes: float | None = None  # stop after this much wall-clock time, resumes included
    max_tokens: int = 4096  # tokens per batch, padding included, max(source, target) side
    update_freq: int = 1  # batches accumulated into one update
    schedule: Literal["inverse_sqrt", "noam", "linear"] = "inverse_sqrt"
    lr: float = 5e-4  # inverse_sqrt, linear: peak lr reached at warmup_steps
    warmup_steps: int = 4000
    warmup_init_lr: float = 1e-7  # inverse_sqrt, linear: lr at step 0, linear to lr at warmup_steps
    noam_scale: float = 1.0  # noam: lr = noam_scale * d_model^-0.5 * min(s^-0.5, s*w^-1.5)
    adam_betas: tuple[float, float] = (0.9, 0.98)  # paper 5.3
    adam_eps: float = 1e-9  # paper 5.3
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # gradient-norm clipping (0: off)
    label_smoothing: float = 0.1  # paper 5.4
    ema_decay: float = 0.0  # exponential moving average of weights (0: off)
    # auto: bf16 where the device computes it natively (CUDA with bf16; CPUs with AMX or
    # avx512_bf16), else fp32: emulated bf16 trains ~10x slower (transformer_mt/machine.py).
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # CPU threads for torch (0: OMP_NUM_THREADS when set, else one per core not busy with other
    # work at start; a thread sharing its core with another process stalls the others).
    threads: int = 0
    # torch.compile the training forward and backward (dynamic shapes: one graph for all batch
    # sizes). Minutes of compilation at the first update; for GPUs: on the development CPU it
    # trained at 0.83-1.01x eager's tokens/s (docs/benchmarks.md).
    compile: bool = False
    seed: int = 1
    log_every: int = 100  # steps between metrics.jsonl rows
    valid_every: int = 1000  # steps between validations (and checkpoints)
    valid_bleu: bool = True  # decode the valid set for BLEU at each validation
    valid_max_sentences: int | None = None  # decode only the first N valid sentences for BLEU
    keep_last: int = 5  # periodic checkpoints kept besides best.pt and last.pt
    patience: int = 0  # stop after this many validations without a better BLEU (0: off)
    nonfinite_loss: Literal["stop", "skip"] = "stop"  # a NaN/inf loss stops or skips the update
    # Fine-tuning: start from this checkpoint's weights, tokenizers and special ids (ours or
    # `tmt import`ed); the run's model and tokenizer sections are the checkpoint's (keys set
    # otherwise are refused, training-only ones such as dropout excepted). None: from scratch.
    init_from: str | None = None

    def validate(self) -> None:
        _positive(self, "train", ["max_steps", "max_tokens", "update_freq", "lr"])
        _positive(self, "train", ["log_every", "valid_every", "adam_eps"])
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ConfigError(f"train.max_minutes={self.max_minutes} must be > 0")
        if self.warmup_steps < 0 or self.warmup_steps >= self.max_steps:
            raise ConfigError(
                f"train.warmup_steps={self.warmup_steps} must be in [0, "
                f"train.max_steps={self.max_steps})"
            )
        _unit_interval(self, "train", ["label_smoothing", "ema_decay"])
        if not all(0.0 <= b < 1.0 for b in self.adam_betas):
            raise ConfigError(f"train.adam_betas={list(self.adam_betas)} must be in [0, 1)")
        for name in ("weight_decay", "clip_norm", "keep_last", "patience", "threads"):
            if getattr(self, name) < 0:
                raise ConfigError(f"train.{name}={getattr(self, name)} must be >= 0")


# Bounds of decode numbers that would otherwise overflow: a length penalty of 1e308 divides by
# infinity, a max_len_b of 1e19 wraps a 64-bit length to 1 token. Output lengths past these
# exceed every position table (the decoder stops there anyway), and |alpha| > 10 weighs a
# length difference of one token more than any log-probability.
DECODE_RANGES: dict[str, tuple[float, float]] = {
    "length_penalty": (-10.0, 10.0),
    "max_len_a": (0.0, 1000.0),
    "max_len_b": (0, 1_000_000),
    "min_len": (0, 1_000_000),
    "temperature": (0.01, 100.0),
}


@dataclass(frozen=True)
class DecodeConfig:
    """Search settings for validation BLEU and `tmt translate`.

    Length penalty (GNMT, Wu et al. 2016): score = log P(y|x) / lp(y), with
    lp(y) = ((5 + |y|) / 6) ** length_penalty under `length_norm: gnmt`, lp(y) = |y| under
    `average`, lp(y) = 1 under `none`. Output length is at most max_len_a * |x| + max_len_b.
    """

    beam_size: int = 5  # 1: greedy
    length_penalty: float = 1.0  # alpha of the GNMT penalty
    length_norm: Literal["gnmt", "average", "none"] = "gnmt"
    max_len_a: float = 1.5
    max_len_b: int = 10
    min_len: int = 1  # tokens before end-of-sentence may be chosen
    n_best: int = 1
    max_tokens: int = 4096  # source tokens per translation batch
    sampling: bool = False  # sample instead of searching (top_k / top_p / temperature)
    top_k: int = 0  # 0: no top-k filter
    top_p: float = 1.0
    temperature: float = 1.0

    def validate(self) -> None:
        for name in ("length_penalty", "max_len_a", "top_p", "temperature"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"decode.{name}={getattr(self, name)} must be a finite number")
        for name, (low, high) in DECODE_RANGES.items():
            if not low <= getattr(self, name) <= high:
                raise ConfigError(
                    f"decode.{name}={getattr(self, name):g} must be in [{low:g}, {high:g}]"
                )
        _positive(self, "decode", ["beam_size", "n_best", "max_tokens", "temperature"])
        if self.n_best > self.beam_size:
            raise ConfigError(
                f"decode.n_best={self.n_best} must be <= decode.beam_size={self.beam_size}"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"decode.top_p={self.top_p} must be in (0, 1]")
        if self.top_k < 0:
            raise ConfigError(f"decode.top_k={self.top_k} must be >= 0")

    def output_settings(self) -> tuple:
        """The value of every field that can change a translation, in field order (all but
        `OUTPUT_NEUTRAL_FIELDS`): settings with equal tuples translate alike. The server's
        translation cache and its search lanes key on this, so that a field added here
        tells requests apart without anyone listing it again."""
        return tuple(
            getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in OUTPUT_NEUTRAL_FIELDS
        )


# DecodeConfig fields that cannot change a translation: `max_tokens` only sizes the offline
# translator's batches, and a batch translates as each of its sentences alone (tests of
# search and of the Translator). Every other field is an output setting, a field added to
# DecodeConfig included, unless it is named here.
OUTPUT_NEUTRAL_FIELDS = frozenset({"max_tokens"})


class PrefixCountError(SettingError, ValueError):
    """Forced decoding was given a number of target prefixes other than one per text. It
    carries both counts, so that each interface names what its user gave (the CLI its
    prefix file, the server its `prefix` field)."""

    def __init__(self, n_prefixes: int, n_texts: int):
        self.n_prefixes, self.n_texts = n_prefixes, n_texts
        super().__init__("prefixes", n_prefixes, f"need one per text ({n_texts})")


def check_one_prefix_per_text(prefixes: Sized | None, n_texts: int) -> None:
    """The one check of forced decoding's rule: one target prefix per text (an empty one
    forces nothing), or no prefixes at all (None).

    Raises:
        PrefixCountError: with both counts.
    """
    if prefixes is not None and len(prefixes) != n_texts:
        raise PrefixCountError(len(prefixes), n_texts)


def decode_field_types(names: Iterable[str]) -> dict[str, Any]:
    """The type of each named DecodeConfig field (`int`, `float`, a `Literal`, ...).

    Which fields users may set is each interface's choice (the server's request body,
    `tmt translate`'s flags); their names and types are the dataclass's.

    Raises:
        KeyError: a name that is not a DecodeConfig field.
    """
    hints = typing.get_type_hints(DecodeConfig)
    found = {}
    for name in names:
        if name not in hints:
            raise KeyError(f"{name}: not a DecodeConfig field")
        found[name] = hints[name]
    return found


@dataclass(frozen=True)
class ExperimentConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def validate(self) -> None:
        for section in (self.model, self.data, self.tokenizer, self.train, self.decode):
            section.validate()
        if self.model.share_embeddings and not self.tokenizer.joint:
            raise ConfigError("model.share_embeddings needs tokenizer.joint: true")
        targets = dict.fromkeys(tgt for _, tgt in self.data.directions())
        untagged = [code for code in targets if code not in self.tokenizer.language_tags]
        if len(targets) > 1 and untagged and self.train.init_from is None:
            raise ConfigError(
                f"data.train translates into {', '.join(targets)}: add "
                f"{', '.join(untagged)} to tokenizer.language_tags (the model reads the target "
                "language's tag in front of each source)"
            )
        if self.data.streaming and self.tokenizer.bpe_dropout > 0:
            raise ConfigError(
                "tokenizer.bpe_dropout needs data.streaming: false (streamed pairs are "
                "segmented once, as they are read)"
            )

    def check_positions(self) -> None:
        """Refuse a position table too short for the training pairs or for decoding them.

        A training pair takes data.max_len + 1 positions on each side (the source EOS, the
        target BOS). Greedy validation of such a source generates up to max_len(x) =
        floor(decode.max_len_a * |x| + decode.max_len_b) tokens with |x| = data.max_len + 1
        (`search.lengths.max_output_lengths`, the same formula on tensors), one decoder position
        each. Without this check the first validation dies before any checkpoint is written.

        Not part of `validate`: the stored config of a finished run must still load for
        translation, which truncates sources and caps decoding at the table.
        """
        table, pair = self.model.max_positions, self.data.max_len + 1
        if table < pair:
            raise ConfigError(
                f"model.max_positions={table} is below data.max_len + 1 = {pair} (the longest "
                f"training pair plus its EOS or BOS); raise model.max_positions to {pair} or "
                "lower data.max_len"
            )
        decode = self.decode
        longest = max(1, math.floor(decode.max_len_a * pair + decode.max_len_b))
        if table < longest:
            raise ConfigError(
                f"model.max_positions={table} is below the decoding length of the longest "
                f"training source, decode.max_len_a * (data.max_len + 1) + decode.max_len_b = "
                f"{decode.max_len_a:g} * {pair} + {decode.max_len_b} = {longest}; raise "
                f"model.max_positions to {longest} or lower decode.max_len_a or decode.max_len_b"
            )


# --- loading -------------------------------------------------------------------------------


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Read a YAML file, apply `key=value` overrides, check every key and value.

    Also holds the config to `ExperimentConfig.check_positions`, as a run about to train must.

    Raises:
        ConfigError: one line naming the dotted key and where it was set: the file (with the
            line, for a key given twice) or the override.
    """
    path = Path(path)
    data = apply_overrides(_read_yaml(path), overrides)
    try:
        config = _parse(data)
        config.check_positions()
    except ConfigError as err:
        raise ConfigError(f"{err} [{_origin(str(err), path, overrides)}]") from None
    return config


def config_from_dict(data: dict[str, Any], source: str = "<dict>") -> ExperimentConfig:
    try:
        return _parse(data)
    except ConfigError as err:
        raise ConfigError(f"{err} [in {source}]") from None


def given_keys(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> set[str]:
    """The dotted keys ("model.d_model") that the file and the overrides set; every other key
    of the config holds its default."""
    data = apply_overrides(_read_yaml(Path(path)), overrides)
    return {
        f"{section}.{key}"
        for section, values in data.items()
        if isinstance(values, dict)
        for key in values
    }


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict:
    """Apply `section.key=value` strings (values parsed as YAML scalars) to a copy of `data`."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. train.lr=5e-4")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        *parents, leaf = key.strip().split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: '{part}' is not a section")
        node[leaf] = value
    return data


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict (tuples as lists) that `config_from_dict` reads back unchanged."""
    return {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config)}


def _plain(value: Any) -> Any:
    """A config value as YAML data: a dataclass as a dict, a tuple as a list, at any depth."""
    if dataclasses.is_dataclass(value):
        return config_to_dict(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def dump_config(config: ExperimentConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False), "utf-8")


def _parse(data: dict[str, Any]) -> ExperimentConfig:
    config = _from_dict(ExperimentConfig, data, "")
    config.validate()
    return config


def _read_yaml(path: Path) -> dict[str, Any]:
    """The mapping a config file holds; every way of not being one is a one-line ConfigError."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a config file; name a .yaml file") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config file ({err.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ConfigError(
            f"{path}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x}); save the file as UTF-8"
        ) from None
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            _refuse_duplicate_keys(root, path)
        data = {} if root is None else loader.construct_document(root)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({one_line(err)})") from None
    finally:
        loader.dispose()
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return data


def _refuse_duplicate_keys(root: yaml.Node, path: Path) -> None:
    """Refuse a key given twice in one mapping, at any depth.

    PyYAML silently keeps the last of two equal keys, so a file that sets `train.lr` twice
    would train with whichever came last, unnoticed.
    """
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    visited: set[int] = set()  # aliases share nodes, and may even point back at an ancestor
    while stack:
        node, name = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{name}[{i}]") for i, item in enumerate(node.value))
        if not isinstance(node, yaml.MappingNode):
            continue
        first_lines: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue  # a list or mapping as a key: no config section has one
            dotted = f"{name}.{key.value}" if name else key.value
            line = key.start_mark.line + 1
            if (key.tag, key.value) in first_lines:
                first = first_lines[(key.tag, key.value)]
                raise ConfigError(
                    f"{path}:{line}: duplicate key {dotted} (first at line {first}); keep one"
                )
            first_lines[(key.tag, key.value)] = line
            stack.append((value, dotted))


def _origin(message: str, path: Path, overrides: list[str] | tuple[str, ...]) -> str:
    """Where the keys that `message` names were set: the overrides that set them, the file, or
    both (a cross-field rule may name one key of each).

    Messages name dotted keys (`train.lr: ...`, `model.d_model=30 ...`), the house rule this
    relies on; a message naming none is blamed on the file.
    """
    sections = "|".join(f.name for f in dataclasses.fields(ExperimentConfig))
    named = set(re.findall(rf"(?<![\w.])(?:{sections})\.[\w.\[\]]*\w\]?", message))
    leading = re.match(r"[\w.\[\]]+(?=: )", message)
    if leading:
        named.add(leading[0])
    blamed = []
    for item in reversed(overrides):  # the last override of a key is the one that holds
        key = item.partition("=")[0].strip()
        hits = {n for n in named if _within(n, key) or _within(key, n)}
        if hits:
            blamed.insert(0, f"override {item!r}")
            named -= hits
    if named or not blamed:
        blamed.insert(0, f"in {path}")
    return ", ".join(blamed)


def _within(name: str, key: str) -> bool:
    """True when dotted `name` is `key` or lies inside it (`train.lr` inside `train`)."""
    return name == key or name.startswith((key + ".", key + "["))


def _from_dict(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in names:
            guess = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean '{guess[0]}'?" if guess else f"valid keys: {', '.join(names)}"
            raise ConfigError(f"{dotted}: unknown key ({hint})")
        kwargs[key] = _coerce(hints[key], value, dotted)
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in kwargs:
            raise ConfigError(f"{prefix}{f.name}: required key missing")
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, dotted: str) -> Any:
    """Check `value` against a type hint; floats accept ints and '1e-4'-style strings."""
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _from_dict(hint, value, dotted + ".")
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            guess = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
            extra = f" (did you mean '{guess[0]}'?)" if guess else ""
            raise ConfigError(
                f"{dotted}: {value!r} is not one of {', '.join(map(repr, choices))}{extra}"
            )
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        return _coerce_union([a for a in args if a is not type(None)], value, dotted)
    if origin is tuple:
        args = typing.get_args(hint)
        variable = args[-1:] == (Ellipsis,)  # tuple[X, ...]: a list of any length
        if not isinstance(value, (list, tuple)) or (not variable and len(value) != len(args)):
            count = "" if variable else f" of {len(args)} values"
            raise ConfigError(f"{dotted}: expected a list{count}, got {value!r}")
        if variable:
            args = args[:1] * len(value)
        return tuple(
            _coerce(a, v, f"{dotted}[{i}]")
            for i, (a, v) in enumerate(zip(args, value, strict=True))
        )
    if hint is float:
        if isinstance(value, bool):
            raise ConfigError(f"{dotted}: expected a number, got {value!r}")
        number = None
        if isinstance(value, (int, float)):
            number = float(value)
        elif isinstance(value, str):
            with contextlib.suppress(ValueError):
                number = float(value)
        if number is None:
            raise ConfigError(f"{dotted}: expected a number, got {value!r}")
        if not math.isfinite(number):  # YAML's .nan and .inf: no setting means either
            raise ConfigError(f"{dotted}: expected a finite number, got {value!r}")
        return number
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{dotted}: expected an integer, got {value!r}")
    if hint is bool and not isinstance(value, bool):
        raise ConfigError(f"{dotted}: expected true or false, got {value!r}")
    if hint is str and not isinstance(value, str):
        raise ConfigError(f"{dotted}: expected a string, got {value!r}")
    return value


_KINDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _coerce_union(members: list[Any], value: Any, dotted: str) -> Any:
    """`value` as the member of a union it is written as: a list as the tuple member, anything
    else as the other (`data.train`: one path, or a list of sources)."""
    if len(members) == 1:
        return _coerce(members[0], value, dotted)
    # Unions of two types pair a scalar with a tuple (`str | tuple[TrainSource, ...]`).
    (listed,) = [m for m in members if typing.get_origin(m) is tuple]
    (scalar,) = [m for m in members if m is not listed]
    if isinstance(value, (list, tuple)):
        return _coerce(listed, value, dotted)
    try:
        return _coerce(scalar, value, dotted)
    except ConfigError:
        kind = _KINDS.get(scalar, scalar.__name__)
        raise ConfigError(f"{dotted}: expected {kind} or a list, got {value!r}") from None


def _positive(section: Any, name: str, fields: list[str]) -> None:
    for f in fields:
        if getattr(section, f) <= 0:
            raise ConfigError(f"{name}.{f}={getattr(section, f)} must be > 0")


def _unit_interval(section: Any, name: str, fields: list[str]) -> None:
    for f in fields:
        if not 0.0 <= getattr(section, f) < 1.0:
            raise ConfigError(f"{name}.{f}={getattr(section, f)} must be in [0, 1)")
