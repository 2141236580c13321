"""`tmt info CHECKPOINT`: what a checkpoint holds, in words or as JSON: how it was made
(trained, averaged, imported), what it translates, its model and size, its vocabularies, how far
its training went and the search it translates with by default.

Which of several checkpoints to deploy, and whether a file is the one a run left, are questions
a user asks before translating; the answers are all in the file. It is read as
`load_checkpoint` reads it (its checksums checked) and the model is built on torch's meta
device to count its parameters, tied matrices once, without copying a weight.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer_mt.artifacts import Checkpoint, fit_weights, rank_position, read_for_inference
from transformer_mt.config import ExperimentConfig, ModelConfig
from transformer_mt.data.tokenizer import UNK_ID, Tokenizer
from transformer_mt.errors import printable
from transformer_mt.inference.languages import LISTED, Languages, tagged
from transformer_mt.model import build_model

ZERO_SHOT_SAMPLE = 3  # zero-shot directions shown where there are more than LISTED


@dataclass(frozen=True)
class CheckpointInfo:
    """What `describe` found; `to_dict` is the JSON of `tmt info --json`."""

    path: str
    size_bytes: int
    # "training", "averaging", "import" (`imported_from` names the model), or "step 0": no
    # training state and no record of an import (imported before the record, or untrained).
    made_by: str
    step: int  # updates trained
    # The directions it may be asked for, as `tmt translate` sees them (`Languages.of`): those
    # of its training data it can be told ("de-en"), and with language tags the zero-shot ones
    # (`zero_shot`).
    directions: list[str]
    model: str  # the architecture in one line
    parameters: int
    vocabulary: str  # the tokenizers in one line
    decode: str  # the default search in one line
    averaged_from: list[str] | None = None
    imported_from: str | None = None  # the hub name or directory `tmt import` read
    fine_tuned_from: str | None = None  # the parent checkpoint (train.init_from) it started from
    # A tagged model's other directions: every one, or where there are more than LISTED
    # (an NLLB-200 model has 40,602, 0.8 MB on one line) the first ZERO_SHOT_SAMPLE;
    # `zero_shot_count` counts them all, between its `languages`.
    zero_shot: list[str] = dataclasses.field(default_factory=list)
    zero_shot_count: int = 0
    languages: list[str] = dataclasses.field(default_factory=list)  # of all its directions
    # A training checkpoint's progress: epoch, elapsed_seconds, best_valid_bleu or, with
    # train.valid_bleu off, best_valid_nll (None before the first validation),
    # skipped_updates; None for other checkpoints (they cannot resume).
    training: dict[str, Any] | None = None
    ema: bool = False  # the weights it translates with are an exponential moving average
    version: str | None = None  # of transformer_mt, when written

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def lines(self) -> list[str]:
        """The text of `tmt info`: one `name  value` line each."""
        rows = [
            ("checkpoint", f"{self.path} ({self.size_bytes / 1e6:.1f} MB)"),
            ("made by", self._made_by()),
            ("translates", self.translates()),
            ("model", f"{self.model}; {self.parameters:,} parameters"),
            ("vocabulary", self.vocabulary),
            ("decode", self.decode),
        ]
        if self.training is not None:
            rows.insert(3, ("training", self._progress()))
        if self.version is not None:
            rows.append(("written by", f"transformer_mt {self.version}"))
        return [f"{name:<11} {value}" for name, value in rows]

    def translates(self) -> str:
        """The directions it may be asked for: trained, then zero-shot (counted, with a
        sample, where they are too many to list)."""
        trained = ", ".join(self.directions) or "no direction of its data its tags can name"
        if self.zero_shot_count > len(self.zero_shot):
            count, sample = self.zero_shot_count, ", ".join(self.zero_shot)
            among = f"between its {len(self.languages):,} languages"
            return f"{trained}; zero-shot: {count:,} directions {among}, such as {sample}, ..."
        return trained + (f"; zero-shot {', '.join(self.zero_shot)}" if self.zero_shot else "")

    def _made_by(self) -> str:
        weights = " (EMA weights)" if self.ema else ""
        if self.averaged_from:
            names = [printable(Path(p).name) for p in self.averaged_from]
            first, last = names[0], names[-1]
            sources = first if len(self.averaged_from) == 1 else f"{first} ... {last}"
            return f"averaging {len(self.averaged_from)} checkpoints ({sources}){weights}"
        if self.made_by == "import":
            # escaped: a name with a line end or a terminal's escapes cannot forge lines
            return f"tmt import of {printable(self.imported_from or '')}"
        if self.made_by == "step 0":
            return "tmt import, or a model never trained (step 0)"
        resumable = "resumable" if self.training is not None else "weights only, not resumable"
        parent = ""
        if self.fine_tuned_from is not None:
            parent = f", fine-tuned from {printable(self.fine_tuned_from)}"
        return f"training{parent}, update {self.step:,} ({resumable}){weights}"

    def _progress(self) -> str:
        training = self.training or {}
        seconds = int(training["elapsed_seconds"])
        parts = [f"epoch {training['epoch']}", f"{seconds // 60} min {seconds % 60} s"]
        if training["best_valid_bleu"] is not None:
            parts.append(f"best validation BLEU {training['best_valid_bleu']:.2f}")
        if training["best_valid_nll"] is not None:
            parts.append(f"best validation NLL {training['best_valid_nll']:.4f}")
        if training["skipped_updates"]:
            parts.append(f"{training['skipped_updates']:,} updates skipped")
        return ", ".join(parts)


def describe(path: str | Path) -> CheckpointInfo:
    """What the checkpoint file `path` holds.

    Raises:
        TmtError: the file is missing, unreadable or not a checkpoint, or its stored config,
            tokenizers, special ids or weights are damaged or do not fit each other, naming
            it: what `tmt translate` would refuse (`read_for_inference`, `fit_weights`).
    """
    checkpoint, config, (src, tgt), specials = read_for_inference(path)
    with torch.device("meta"):
        model = build_model(config.model, src.vocab_size, tgt.vocab_size, specials.pad)
    parameters = sum(p.numel() for p in model.parameters())  # tied matrices once
    fit_weights(model, checkpoint.weights, path, assign=True)  # as translating checks them
    data = config.data
    languages = Languages.of(
        specials,
        data.directions(),
        tagged(data.src_lang, specials),
        tagged(data.tgt_lang, specials),
    )
    made_by = "training" if checkpoint.step > 0 or checkpoint.training else "step 0"
    if checkpoint.imported_from is not None:
        made_by = "import"
    return CheckpointInfo(
        path=str(path),
        size_bytes=Path(path).stat().st_size,
        made_by="averaging" if checkpoint.averaged_from else made_by,
        step=checkpoint.step,
        directions=[f"{s}-{t}" for s, t in languages.trained],
        zero_shot=_zero_shot(languages),
        zero_shot_count=len(languages.zero_shot),
        languages=list(languages.codes),
        model=_model_line(config.model),
        parameters=parameters,
        vocabulary=_vocabulary_line(src, tgt, config),
        decode=_decode_line(config),
        averaged_from=checkpoint.averaged_from,
        imported_from=checkpoint.imported_from,
        fine_tuned_from=config.train.init_from,
        training=_training(checkpoint, config.train.valid_bleu),
        ema=checkpoint.ema is not None,
        version=checkpoint.version,
    )


def _zero_shot(languages: Languages) -> list[str]:
    """Its zero-shot directions as `CheckpointInfo.zero_shot` holds them: all, or a sample."""
    pairs = languages.zero_shot
    shown = pairs if len(pairs) <= LISTED else pairs[:ZERO_SHOT_SAMPLE]
    return [f"{s}-{t}" for s, t in shown]


def _model_line(cfg: ModelConfig) -> str:
    heads = f"{cfg.n_heads} heads"
    if cfg.n_kv_heads not in (None, cfg.n_heads):
        heads += f" ({cfg.n_kv_heads} key/value)"
    norm = "pre-norm" if cfg.pre_norm else "post-norm"
    parts = [
        f"{cfg.n_layers}+{cfg.decoder_layers} layers",
        f"d_model {cfg.d_model}",
        heads,
        f"d_ff {cfg.d_ff}",
        cfg.activation,
        norm,
        f"{cfg.positions} positions",
    ]
    return ", ".join(parts + _model_options(cfg))


def _model_options(cfg: ModelConfig) -> list[str]:
    """What else makes the network of `cfg` another one, where it is not the default: two
    models of the same sizes had been described alike (a Marian layout with separate
    embeddings, an untied output and its bias, beside a tied one)."""
    found = []
    if cfg.positions == "shaw":
        values = ", with values" if cfg.relative_values else ""
        found.append(f"distances clipped at {cfg.max_relative_position}{values}")
    if cfg.positions == "t5":
        found.append(f"{cfg.relative_buckets} buckets to {cfg.relative_max_distance}")
    if cfg.attention == "mla":
        rope = f", rotary {cfg.mla_rope_dim}" if cfg.positions == "rope" else ""
        encoder = ", in the encoder too" if cfg.mla_encoder else ""
        found.append(f"mla attention (latent {cfg.kv_rank}{rope}{encoder})")
    if cfg.attention_pattern not in (None, "full"):
        reach = []
        if "local" in cfg.attention_pattern:
            reach.append(f"window {cfg.attention_window}")
        if "dilated" in cfg.attention_pattern:
            reach.append(f"dilation {cfg.attention_dilation}")
        found.append(f"{cfg.attention_pattern} attention pattern ({', '.join(reach)})")
    if not cfg.share_embeddings:
        found.append("separate embeddings")
    if not cfg.tie_output:
        found.append("untied output")
    if cfg.output_bias:
        found.append("output bias")
    if not cfg.scale_embeddings:
        found.append("unscaled embeddings")
    return found


def _vocabulary_line(src: Tokenizer, tgt: Tokenizer, config: ExperimentConfig) -> str:
    if src.model_bytes == tgt.model_bytes:
        line = f"one SentencePiece model for both sides, {src.vocab_size:,} pieces"
    else:
        line = f"SentencePiece, {src.vocab_size:,} source and {tgt.vocab_size:,} target pieces"
    if tgt.piece_id("<0x00>") != UNK_ID:
        line += ", byte fallback"
    if config.tokenizer.language_tags:
        line += f", language tags {' '.join(config.tokenizer.language_tags)}"
    return line


def _decode_line(config: ExperimentConfig) -> str:
    decode = config.decode
    search = "greedy" if decode.beam_size == 1 else f"beam {decode.beam_size}"
    if decode.sampling:
        search = "sampling"
    parts = [search, f"length_norm {decode.length_norm}"]
    if decode.length_norm in ("gnmt", "power"):
        parts.append(f"length_penalty {decode.length_penalty:g}")
    parts += [f"max_len {decode.max_len_a:g} x source + {decode.max_len_b}"]
    parts += [f"min_len {decode.min_len}"]
    if decode.no_repeat_ngram_size:
        parts.append(f"no_repeat_ngram_size {decode.no_repeat_ngram_size}")
    if decode.disable_unk:
        parts.append("disable_unk")
    if decode.replace_unk:
        parts.append("replace_unk")
    return ", ".join(parts)


def _training(checkpoint: Checkpoint, valid_bleu: bool) -> dict[str, Any] | None:
    """A training checkpoint's progress; its best score is BLEU, or minus the NLL where the
    run validated without BLEU (`ValidResult.score`)."""
    training = checkpoint.training
    if training is None:
        return None
    best = training.best_score
    return {
        # The epoch of the rank furthest behind, where a resumed run of one rank goes on.
        "epoch": rank_position(training.data_position, 0, 1)["epoch"],
        "elapsed_seconds": float(training.stats.get("elapsed_seconds", 0.0)),
        "best_valid_bleu": best if valid_bleu else None,
        "best_valid_nll": -best if best is not None and not valid_bleu else None,
        "skipped_updates": int(training.stats.get("skipped_updates", 0)),
    }
