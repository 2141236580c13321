"""Training the SentencePiece models of a run: on the training corpus, or reused.

A trained model is saved as `spm-<role>-<hash>.model` where the hash covers the training text
and every setting that changes the model, so a second run with the same corpus and settings
finds the file and skips training; a shared cache directory keeps a copy for later runs.
SentencePiece's own refusals (a vocabulary too large for the text, too small for its
characters) are turned into one line naming the setting and which way to move it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import random
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from transformer_mt.config import TokenizerConfig
from transformer_mt.data.specials import language_tag
from transformer_mt.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    TokenizerError,
)
from transformer_mt.errors import TmtError, one_line
from transformer_mt.files import atomic_open, atomic_path

log = logging.getLogger(__name__)

# The seed of SentencePiece's sample of the training sentences (`_train_sentencepiece`).
SAMPLING_SEED = 1
SENTENCEPIECE_MAX_SENTENCE_LENGTH = 4192  # its default, in bytes; raised to the longest line


@dataclass(frozen=True)
class TokenizerPair:
    """Source and target tokenizers; the same object twice when the vocabulary is joint."""

    src: Tokenizer
    tgt: Tokenizer
    src_path: Path
    tgt_path: Path

    @property
    def joint(self) -> bool:
        return self.src is self.tgt


def train_tokenizers(
    cfg: TokenizerConfig,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    out_dir: str | Path,
    cache_dir: str | Path | None = None,
    symbols: Sequence[str] = (),
) -> TokenizerPair:
    """Train (or reuse) the source and target tokenizers and save them into `out_dir`.

    With `cfg.joint` one model learns from source and target text together (needed when the
    model shares embeddings); otherwise each side gets its own model. A model whose name (hash of
    text and settings) already exists in `out_dir` or `cache_dir` is reused, not retrained.

    Args:
        cfg: vocabulary size, model type, character coverage, sentences sampled.
        src_texts, tgt_texts: the training corpus, one sentence per item.
        out_dir: the run directory; translation later needs only the files written here.
        cache_dir: optional shared directory that also keeps a copy, so new runs skip training.
        symbols: pieces besides the language tags that must stay whole (SentencePiece's
            user-defined symbols), e.g. the back-translation tag of tagged training sources.

    Raises:
        TokenizerError: settings the corpus cannot satisfy (vocab_size too small for its
            characters or too large for its text), naming the setting and which way to move it.
    """
    if cfg.joint:
        corpora = [src_texts, tgt_texts]
        path = _train_or_reuse(cfg, "joint", corpora, Path(out_dir), cache_dir, symbols)
        tok = Tokenizer.load(path)
        return TokenizerPair(tok, tok, path, path)
    src_path = _train_or_reuse(cfg, "src", [src_texts], Path(out_dir), cache_dir, symbols)
    tgt_path = _train_or_reuse(cfg, "tgt", [tgt_texts], Path(out_dir), cache_dir, symbols)
    return TokenizerPair(Tokenizer.load(src_path), Tokenizer.load(tgt_path), src_path, tgt_path)


def tokenizer_key(
    cfg: TokenizerConfig, corpora: Iterable[Sequence[str]], symbols: Sequence[str] = ()
) -> str:
    """Hash of the training text and every setting that changes the trained model."""
    digest = hashlib.sha256()
    settings = {
        "model_type": cfg.model_type,
        "vocab_size": cfg.vocab_size,
        "character_coverage": cfg.character_coverage,
        "input_sentence_size": cfg.input_sentence_size,
        "special_ids": [PAD_ID, UNK_ID, BOS_ID, EOS_ID],
        "sentencepiece": spm.__version__,
    }
    if cfg.language_tags:  # only then: the names of tokenizers trained before stay valid
        settings["language_tags"] = list(cfg.language_tags)
    if symbols:  # likewise
        settings["symbols"] = list(symbols)
    if cfg.byte_fallback:  # likewise
        settings["byte_fallback"] = True
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for texts in corpora:
        digest.update(b"\x00corpus\x00")
        for line in texts:
            digest.update(line.encode("utf-8"))
            digest.update(b"\n")
    return digest.hexdigest()[:16]


def _train_or_reuse(
    cfg: TokenizerConfig,
    role: str,
    corpora: list[Sequence[str]],
    out_dir: Path,
    cache_dir: str | Path | None,
    symbols: Sequence[str],
) -> Path:
    name = f"spm-{role}-{tokenizer_key(cfg, corpora, symbols)}.model"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / name
    if _reusable(target):
        log.info("tokenizer %s exists; not retraining", target)
        return target
    cached = Path(cache_dir) / name if cache_dir is not None else None
    if cached is not None and _reusable(cached):
        log.info("tokenizer %s found in cache; copying", name)
        with atomic_path(target) as tmp:
            shutil.copyfile(cached, tmp)
        return target
    model_bytes = _train_sentencepiece(cfg, corpora, symbols)
    _write_atomic(target, model_bytes)
    if cached is not None:
        _cache(cached, model_bytes)
    log.info("trained tokenizer %s (vocab %d)", target, cfg.vocab_size)
    return target


def _reusable(path: Path) -> bool:
    """Whether `path` holds a model to reuse. One that does not load (truncated by a full disk,
    or a copy of such a cache file in the run directory) is warned of, and the caller trains
    the model anew and writes it over the damaged file; the name alone would otherwise keep
    every retry failing. A run with a checkpoint takes its tokenizers from the checkpoint and
    never comes here."""
    if not path.exists():
        return False
    try:
        Tokenizer.load(path)
    except (TokenizerError, OSError) as err:
        log.warning("%s: unreadable tokenizer (%s); training it anew", path, one_line(err))
        return False
    return True


def _cache(path: Path, model_bytes: bytes) -> None:
    """Keep a copy in the cache folder for other runs; one that cannot be written (a full disk,
    a read-only shared folder) costs them the training, not this run: a warning."""
    try:
        _write_atomic(path, model_bytes)
    except TmtError as err:
        log.warning("could not cache the tokenizer (%s); the next run trains it again", err)


def _train_sentencepiece(
    cfg: TokenizerConfig, corpora: list[Sequence[str]], symbols: Sequence[str]
) -> bytes:
    """Run the SentencePiece trainer in memory and return the serialized model."""
    lines = [line for texts in corpora for line in texts if line.strip()]
    if not lines:
        raise TokenizerError("cannot train a tokenizer on an empty corpus")
    if len(lines) > cfg.input_sentence_size:
        # Sampled here: SentencePiece's own sample differs from one process to the next, its
        # seed set or not, and so did the model of one corpus (under one cached name).
        lines = random.Random(SAMPLING_SEED).sample(lines, cfg.input_sentence_size)
    # SentencePiece skips, with a log line only, every sentence over `max_sentence_length`
    # bytes (4,192 by default): paragraph-length lines would go unlearnt, and a corpus of
    # nothing else (a file whose lines end in CR alone reads as one line) would leave it no
    # sentence at all. The longest line is the bound that keeps every line; SentencePiece holds
    # them all in memory either way.
    longest = max(len(line.encode("utf-8")) for line in lines)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            max_sentence_length=max(longest, SENTENCEPIECE_MAX_SENTENCE_LENGTH),
            model_writer=model,
            model_type=cfg.model_type,
            vocab_size=cfg.vocab_size,
            character_coverage=cfg.character_coverage,
            input_sentence_size=cfg.input_sentence_size,
            shuffle_input_sentence=True,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            user_defined_symbols=[*(language_tag(c) for c in cfg.language_tags), *symbols],
            byte_fallback=cfg.byte_fallback,
            num_threads=2,
            minloglevel=2,
        )
    except RuntimeError as err:
        raise _training_error(cfg, len(lines), one_line(err)) from None
    return model.getvalue()


def _training_error(cfg: TokenizerConfig, n_lines: int, message: str) -> TokenizerError:
    """SentencePiece's refusal as the setting to change and which way.

    It refuses a vocabulary smaller than the characters it must keep plus the 4 special pieces
    ("Vocabulary size is smaller than required_chars. 20 vs 32"), and one larger than the
    pieces the corpus yields ("Vocabulary size too high (5000). Please set it to a value <= 172").
    """
    if "smaller than required_chars" in message:
        at_least = _quoted_bound(message, r"\d+ vs (\d+)", " to at least {}")
        specials = "4 special pieces" + (
            " and tokenizer.byte_fallback's 256 byte pieces" if cfg.byte_fallback else ""
        )
        return TokenizerError(
            f"tokenizer.vocab_size={cfg.vocab_size} is too small for the characters of this "
            f"corpus (each character kept by tokenizer.character_coverage={cfg.character_coverage}"
            f" needs a piece, plus {specials}); raise tokenizer.vocab_size{at_least}, or "
            "lower tokenizer.character_coverage (down to 0.98) to leave rare characters out"
        )
    if "too high" in message:
        at_most = _quoted_bound(message, r"<= (\d+)", " to {} or less")
        return TokenizerError(
            f"tokenizer.vocab_size={cfg.vocab_size} is too large for this corpus of {n_lines} "
            f"lines; lower tokenizer.vocab_size{at_most}, or train on more text"
        )
    return TokenizerError(f"SentencePiece training failed: {message}")


def _quoted_bound(message: str, pattern: str, template: str) -> str:
    """`template` holding the number that `pattern` finds in SentencePiece's message; "" when
    the message does not say it."""
    found = re.search(pattern, message)
    return template.format(found[1]) if found else ""


def _write_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary of this process's own: runs sharing a cache folder may write
    the same tokenizer at once (`files.atomic_path`).

    Raises:
        TmtError: the file cannot be written (`MachineError` for a full disk).
    """
    with atomic_open(path, "wb") as f:
        f.write(data)
