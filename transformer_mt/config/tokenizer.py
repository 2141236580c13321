"""TokenizerConfig: the SentencePiece subword model trained on the training corpus, or given."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields
from typing import Literal

from transformer_mt.config.checks import check_language_code
from transformer_mt.config.errors import ConfigError

# SentencePiece reads the vocabulary size as a 32-bit int.
MAX_VOCAB = 2**31 - 1
# ... and the sentences it samples as a 64-bit one, more than 100 of them (its own check).
MIN_SENTENCES = 101
MAX_SENTENCES = 2**63 - 1

# The keys that configure training a tokenizer: a given model (model_file) takes none of them.
TRAINING_KEYS = (
    "model_type",
    "vocab_size",
    "character_coverage",
    "input_sentence_size",
    "extra_text",
    "byte_fallback",
)


@dataclass(frozen=True)
class TokenizerConfig:
    """SentencePiece subword model trained on the training corpus, or given as a file.

    Special ids are fixed: pad=0, unk=1, bos=2, eos=3 (see data/tokenizer.py); a given model
    is renumbered to them (data/tokenizer_adopt.py).
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
    # A character the vocabulary left out (tokenizer.character_coverage < 1, or one the corpus
    # never held) is written as its UTF-8 bytes, 256 pieces of the vocabulary, instead of the
    # unknown piece: no input is lost to ⁇ and the model can copy such characters (names, rare
    # kanji; 13 of 500 Japanese test sentences of small_parallel_enja hold one at 0.9995).
    byte_fallback: bool = False
    # BPE-dropout (Provilkov et al., 2020): while training, each merge is skipped with this
    # probability and the training set is re-segmented every epoch, a regulariser for small
    # corpora; validation and translation always use the deterministic segmentation. 0: off.
    bpe_dropout: float = 0.0
    # Which sides BPE-dropout re-segments. On the target it changes what the decoder must
    # predict, which slowed learning to half speed on Multi30k (en-de, 60-minute budget).
    bpe_dropout_sides: Literal["both", "source"] = "both"
    # A SentencePiece model trained elsewhere (spm_train, another toolkit), used as it is
    # instead of training one: its vocabulary, segmentation and normalisation, its specials
    # renumbered. With joint: false it is the source side's, and tgt_model_file the target's.
    model_file: str | None = None
    tgt_model_file: str | None = None

    def validate(self) -> None:
        self._check_given_model()
        if not 0.0 <= self.bpe_dropout < 1.0:
            raise ConfigError(
                f"tokenizer.bpe_dropout={self.bpe_dropout} must be in [0, 1)",
                keys=("tokenizer.bpe_dropout",),
            )
        if self.bpe_dropout and self.model_type != "bpe":
            raise ConfigError(
                f"tokenizer.bpe_dropout needs model_type bpe, not {self.model_type!r}",
                keys=("tokenizer.bpe_dropout", "tokenizer.model_type"),
            )
        if not 8 <= self.vocab_size <= MAX_VOCAB:
            raise ConfigError(
                f"tokenizer.vocab_size={self.vocab_size} must be in [8, {MAX_VOCAB}]",
                keys=("tokenizer.vocab_size",),
            )
        if self.language_tags and not self.joint:
            raise ConfigError(
                "tokenizer.language_tags needs tokenizer.joint: true (a tag in front of a source "
                "is a target language's, one id on both sides)",
                keys=("tokenizer.language_tags", "tokenizer.joint"),
            )
        for code in self.language_tags:
            key = "tokenizer.language_tags"
            check_language_code(code, f"{key} lists {code!r}", key)
        repeated = sorted(code for code, n in Counter(self.language_tags).items() if n > 1)
        if repeated:
            raise ConfigError(
                f"tokenizer.language_tags lists {', '.join(repeated)} more than once",
                keys=("tokenizer.language_tags",),
            )
        if not 0.98 <= self.character_coverage <= 1.0:
            raise ConfigError(
                f"tokenizer.character_coverage={self.character_coverage} must be in [0.98, 1] "
                "(the range SentencePiece accepts; 0.9995 suits scripts with many characters)",
                keys=("tokenizer.character_coverage",),
            )
        if not MIN_SENTENCES <= self.input_sentence_size <= MAX_SENTENCES:
            raise ConfigError(
                f"tokenizer.input_sentence_size={self.input_sentence_size} must be in "
                f"[{MIN_SENTENCES}, {MAX_SENTENCES}] (SentencePiece samples more than 100)",
                keys=("tokenizer.input_sentence_size",),
            )

    def _check_given_model(self) -> None:
        for key in ("model_file", "tgt_model_file"):
            if getattr(self, key) == "":
                raise ConfigError(
                    f"tokenizer.{key} is empty: name a SentencePiece .model file, or null",
                    keys=(f"tokenizer.{key}",),
                )
        if self.tgt_model_file is not None and self.joint:
            raise ConfigError(
                "tokenizer.tgt_model_file needs tokenizer.joint: false (a joint vocabulary is "
                "one model, tokenizer.model_file)",
                keys=("tokenizer.tgt_model_file", "tokenizer.joint"),
            )
        if self.tgt_model_file is not None and self.model_file is None:
            raise ConfigError(
                "tokenizer.tgt_model_file needs tokenizer.model_file (the source side's model)",
                keys=("tokenizer.tgt_model_file",),
            )
        if self.model_file is None:
            return
        if not self.joint and self.tgt_model_file is None:
            raise ConfigError(
                "tokenizer.model_file with tokenizer.joint: false needs tokenizer.tgt_model_file "
                "too (the target side's model)",
                keys=("tokenizer.model_file", "tokenizer.joint"),
            )
        defaults = {f.name: f.default for f in fields(self)}
        refuse_training_keys([key for key in TRAINING_KEYS if getattr(self, key) != defaults[key]])


def refuse_training_keys(given: list[str]) -> None:
    """Refuse the `TRAINING_KEYS` `given` beside a `model_file` (a config file's keys are
    checked as written, so that one set to its default is refused too: it would be ignored).

    Raises:
        ConfigError: naming them.
    """
    if given:
        keys = tuple(f"tokenizer.{key}" for key in given)
        them = "them" if len(keys) > 1 else "it"
        raise ConfigError(
            f"{', '.join(keys)}: for training a tokenizer, and tokenizer.model_file gives a "
            f"trained one, used as it is; remove {them}",
            keys=(*keys, "tokenizer.model_file"),
        )
