"""TrainConfig: optimisation, precision, validation and checkpointing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from transformer_mt.config.checks import check_positive, check_unit_interval
from transformer_mt.config.errors import ConfigError

MAX_THREADS = 1024  # torch threads a run may ask for
MAX_STEPS = 2**63 - 1  # a 64-bit step counter
MAX_SEED = 2**32 - 1  # numpy's range, which every library's seed takes
# Batches one update accumulates, held in a list until it is made: 4096 of 4096 tokens are
# 16.8M tokens an update, 40x the largest published recipes' (fairseq's 400k).
MAX_UPDATE_FREQ = 4096
# Padding lengths to a multiple beyond the longest position table trained is never of use.
MAX_PAD_MULTIPLE = 1 << 16


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, precision, validation and checkpointing."""

    max_steps: int = 100_000  # optimizer updates
    max_epochs: int | None = None  # stop after this many passes as well (None: no limit)
    max_minutes: float | None = None  # stop after this much wall-clock time, resumes included
    max_tokens: int = 4096  # tokens per batch, padding included, max(source, target) side
    # Pad batch lengths up to multiples of this (8 suits tensor cores): a GPU then sees a few
    # dozen batch shapes, not a new one almost every batch, each costing kernel selection and
    # allocator growth once. On the 2-core CPU (Multi30k, max_tokens 2048) 8 gave 20% more
    # updates an hour at about the same real tokens/s, each batch holding 14% fewer real target
    # tokens, and no lower BLEU at equal updates; the hour-long quickstart with 8 made 16% more
    # updates and scored 42.48 on test2016 against 42.07 (docs/results.md), so both quickstart
    # recipes set 8. The default leaves batches as the budget cuts them.
    pad_to_multiple: int = 1
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
    # Replay each update from a CUDA graph recorded once per batch shape (with pad_to_multiple,
    # a few dozen): a GPU then pays one launch an update instead of one per kernel. One CUDA
    # process, update_freq 1, bf16 or fp32, no compile (training/graphs.py says why).
    cuda_graphs: bool = False
    seed: int = 1
    log_every: int = 100  # steps between metrics.jsonl rows
    valid_every: int = 1000  # steps between validations (and checkpoints)
    valid_bleu: bool = True  # decode the valid set for BLEU at each validation
    valid_max_sentences: int | None = None  # decode only the first N valid sentences for BLEU
    keep_last: int = 5  # periodic checkpoints kept besides best.pt and last.pt
    patience: int = 0  # stop after this many validations without a better BLEU (0: off)
    # A NaN/inf loss or gradient norm: the update is skipped on the device; stop then ends the
    # run at the next metrics row or checkpoint, naming the step (no wait in every update).
    nonfinite_loss: Literal["stop", "skip"] = "stop"
    # Fine-tuning: start from this checkpoint's weights, tokenizers and special ids (ours or
    # `tmt import`ed); the run's model and tokenizer sections are the checkpoint's (keys set
    # otherwise are refused, training-only ones such as dropout excepted). None: from scratch.
    init_from: str | None = None

    def validate(self) -> None:
        check_positive(self, "train", ["max_steps", "max_tokens", "update_freq", "lr"])
        check_positive(self, "train", ["log_every", "valid_every", "adam_eps", "pad_to_multiple"])
        check_positive(self, "train", ["noam_scale"])
        if self.max_steps > MAX_STEPS:  # the progress line's arithmetic takes it as a float
            raise ConfigError(
                f"train.max_steps={self.max_steps} must be in [1, 2**63 - 1]",
                keys=("train.max_steps",),
            )
        for name in ("max_epochs", "max_minutes", "valid_max_sentences"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(
                    f"train.{name}={value} must be > 0 (or null: no limit)", keys=(f"train.{name}",)
                )
        if self.warmup_steps < 0:
            raise ConfigError(
                f"train.warmup_steps={self.warmup_steps} must be >= 0",
                keys=("train.warmup_steps",),
            )
        if self.warmup_steps >= self.max_steps:
            # Met by every short run of a shipped config (a smoke test of a few steps): the
            # message says the second override such a run needs. Not clamped, so that a
            # config means what it says.
            raise ConfigError(
                f"train.warmup_steps={self.warmup_steps} must be < train.max_steps="
                f"{self.max_steps}: for a run this short set the warm-up too, e.g. "
                f"train.warmup_steps={self.max_steps // 10}",
                keys=("train.warmup_steps", "train.max_steps"),
            )
        check_unit_interval(self, "train", ["label_smoothing", "ema_decay"])
        if not all(0.0 <= b < 1.0 for b in self.adam_betas):
            raise ConfigError(
                f"train.adam_betas={list(self.adam_betas)} must be in [0, 1)",
                keys=("train.adam_betas",),
            )
        for name in ("weight_decay", "clip_norm", "keep_last", "patience", "warmup_init_lr"):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"train.{name}={getattr(self, name)} must be >= 0", keys=(f"train.{name}",)
                )
        # Above these, the libraries fail with their own errors (a thread they cannot start,
        # a seed that does not fit 64 bits, a length past a C long), not naming the key, or
        # memory runs out.
        bounded = (
            ("threads", 0, MAX_THREADS),
            ("seed", 0, MAX_SEED),
            ("update_freq", 1, MAX_UPDATE_FREQ),
            ("pad_to_multiple", 1, MAX_PAD_MULTIPLE),
        )
        for name, least, most in bounded:
            if not least <= getattr(self, name) <= most:
                raise ConfigError(
                    f"train.{name}={getattr(self, name)} must be in [{least}, {most}]",
                    keys=(f"train.{name}",),
                )
        if self.cuda_graphs:
            conflicts = {
                "train.update_freq": self.update_freq != 1,
                "train.precision": self.precision == "fp16",
                "train.compile": self.compile,
            }
            named = [key for key, conflict in conflicts.items() if conflict]
            if named:
                raise ConfigError(
                    f"train.cuda_graphs records one batch an update in bf16 or fp32, eagerly: "
                    f"it cannot go with {', '.join(named)} as set",
                    keys=("train.cuda_graphs", *named),
                )
