"""Encode a `src`/`tgt` corpus into token ids once, and cache the result as Arrow on disk.

The cache key is a hash of the corpus text plus the checksums of both tokenizers, so a second
run with the same data and tokenizer loads ids instead of re-encoding, and any change to either
invalidates the entry. Runs may share the cache folder, at the same time too (`_save`).
Encoding runs in SentencePiece's own C++ threads (`num_threads`); that beats
`datasets.map(num_proc=...)`, which pays to pickle every line into worker processes.

In memory an encoded side is a `TokenColumn` (token_column.py), which is what the Arrow column
already is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa

from transformer_mt.data.dataset import column_texts
from transformer_mt.data.readers import DataError
from transformer_mt.data.token_column import TokenColumn
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.data.typed_tags import NO_TAGS, TypedTags
from transformer_mt.errors import one_line
from transformer_mt.temporaries import remove_stale_temporaries, temporary_name

log = logging.getLogger(__name__)

ENCODE_CHUNK = 50_000  # lines per SentencePiece call; bounds the Python lists alive at once
# Shares of a training side's tokens that are the unknown piece: above the first a warning,
# above the second a refusal. A tokenizer of the corpus's own text leaves out only the rarest
# characters (`character_coverage`), well under 1% of the tokens; one made for another
# language or script (`tokenizer.model_file`) turns most of the text into <unk>, and the model
# would learn to write nothing else.
WARN_UNKNOWN_SHARE = 0.01
MAX_UNKNOWN_SHARE = 0.5


@dataclass(frozen=True)
class EncodedCorpus:
    """Token ids of a parallel corpus (no BOS/EOS), row i of `src` aligned with row i of `tgt`.

    `directions` numbers each row's direction in `DataConfig.directions()` (which language tags
    frame it, `specials.Framing`); None: every row is in direction 0.
    """

    src: TokenColumn
    tgt: TokenColumn
    directions: np.ndarray | None = None  # (N,) int64
    # `corpus_key` of the text and tokenizers the rows were encoded from (None: unknown). A
    # training position names it, so that a resume notices a corpus replaced under its name.
    key: str | None = None

    def __len__(self) -> int:
        return len(self.src)

    @property
    def n_tokens(self) -> int:
        """Token ids on both sides together (no BOS/EOS)."""
        return int(len(self.src.values) + len(self.tgt.values))

    def select(self, indices: np.ndarray) -> EncodedCorpus:
        directions = None if self.directions is None else self.directions[indices]
        return EncodedCorpus(
            self.src.select(indices), self.tgt.select(indices), directions, self.key
        )

    def without_tags(self, tags: tuple[TypedTags, TypedTags]) -> tuple[EncodedCorpus, int]:
        """The pairs with the tags written in their text taken out (`typed_tags`; `tags`:
        source, target), and how many tags there were."""
        src, in_src = self.src.without_tags(tags[0])
        tgt, in_tgt = self.tgt.without_tags(tags[1])
        return dataclasses.replace(self, src=src, tgt=tgt), in_src + in_tgt

    def check_unknowns(self, where: str, tokenizers: tuple[Tokenizer, Tokenizer]) -> None:
        """Warn of a side whose pieces are more than `WARN_UNKNOWN_SHARE` unknown; refuse one
        of more than `MAX_UNKNOWN_SHARE`. `where` names the corpus; `tokenizers` (source,
        target) encoded it. The word-boundary piece "▁" is not counted: a word the tokenizer
        cannot spell at all is "▁" then <unk>, so a text of another script would count as
        only half unknown.

        Raises:
            DataError: naming the corpus and the side.
        """
        sides = zip(("source", "target"), (self.src, self.tgt), tokenizers, strict=True)
        for side, column, tokenizer in sides:
            # An imported model's table numbers its unknown piece itself (NLLB's is 3).
            unk, boundary = tokenizer.piece_id("<unk>"), tokenizer.piece_id("\u2581")
            unknown = np.count_nonzero(column.values == unk)
            boundaries = np.count_nonzero(column.values == boundary) if boundary != unk else 0
            share = unknown / max(len(column.values) - boundaries, 1)
            if share <= WARN_UNKNOWN_SHARE:
                continue
            found = (
                f"{where}: {share:.1%} of the {side} side's pieces are the unknown piece: its "
                "tokenizer lacks the characters of this text (a tokenizer.model_file made for "
                "another language or script?)"
            )
            if share > MAX_UNKNOWN_SHARE:
                raise DataError(f"{found}; a model trained on it writes little but <unk>")
            log.warning("%s; each is trained as <unk>", found)

    def direction_of(self, indices: np.ndarray) -> np.ndarray:
        """(len(indices),) int64 direction numbers of rows `indices`."""
        if self.directions is None:
            return np.zeros(len(indices), dtype=np.int64)
        return self.directions[indices]


def encode_corpus(
    corpus: datasets.Dataset,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    cache_dir: str | Path | None = None,
    num_threads: int = -1,
) -> EncodedCorpus:
    """Token ids for every pair of `corpus`, from the cache when it holds them.

    Args:
        corpus: Dataset with string columns `src` and `tgt`, and an int `direction` column
            where its pairs go in several directions (kept out of the cache: it is the text's).
        src_tokenizer, tgt_tokenizer: may be the same object (joint vocabulary).
        cache_dir: where encoded corpora live (`DataConfig.cache_dir`); None disables caching.
        num_threads: SentencePiece encoding threads (-1: all cores).
    """
    src_texts, tgt_texts = column_texts(corpus, "src"), column_texts(corpus, "tgt")
    directions = None
    if "direction" in corpus.column_names:
        directions = corpus.data.column("direction").to_numpy().astype(np.int64)
    key = corpus_key(src_texts, tgt_texts, src_tokenizer, tgt_tokenizer)
    path, damaged = None, False
    if cache_dir is not None:
        path = Path(cache_dir) / f"encoded-{key}"
        cached = _load(path)
        if cached is not None and len(cached) != len(src_texts):  # not this corpus's
            log.warning(
                "%s: %d rows for a corpus of %d pairs; encoding it again",
                *(path, len(cached), len(src_texts)),
            )
            cached = None
        if cached is not None:
            return dataclasses.replace(cached, directions=directions, key=key)
        damaged = path.exists()  # an entry that would not load: this writer replaces it
    encoded = EncodedCorpus(
        _encode_side(src_tokenizer, src_texts, num_threads),
        _encode_side(tgt_tokenizer, tgt_texts, num_threads),
        directions,
        key,
    )
    if path is not None:
        _save(encoded, path, damaged)
    return encoded


def corpus_key(
    src_texts: Sequence[str], tgt_texts: Sequence[str], src_tok: Tokenizer, tgt_tok: Tokenizer
) -> str:
    """Hash of both sides' text and both tokenizers' checksums (the encoded-cache key)."""
    digest = hashlib.sha256()
    digest.update(f"{src_tok.sha256}:{tgt_tok.sha256}:".encode())
    for texts in (src_texts, tgt_texts):
        digest.update("\n".join(texts).encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


def _encode_side(tokenizer: Tokenizer, texts: Sequence[str], num_threads: int) -> TokenColumn:
    starts = range(0, len(texts), ENCODE_CHUNK)
    return TokenColumn.concat(
        [
            TokenColumn.from_lists(tokenizer.encode_batch(texts[s : s + ENCODE_CHUNK], num_threads))
            for s in starts
        ]
    )


def _load(path: Path) -> EncodedCorpus | None:
    """The cache entry at `path`; None when there is none, or it cannot be read (warned)."""
    if not (path / "dataset_info.json").exists():
        return None
    log.info("loading encoded corpus from %s", path)
    try:
        table = datasets.load_from_disk(str(path)).data
        return EncodedCorpus(
            TokenColumn.from_arrow(table.column("src_ids")),
            TokenColumn.from_arrow(table.column("tgt_ids")),
        )
    except Exception as err:  # datasets and pyarrow raise many types for damaged files
        log.warning("%s: unreadable encoded corpus (%s); encoding it again", path, one_line(err))
        return None


def _save(encoded: EncodedCorpus, path: Path, damaged: bool = False) -> None:
    """Write the entry under a temporary folder of this writer's own, then rename it to `path`.

    Runs sharing a cache folder (the default data/cache) may encode one corpus at the same
    time: each writes its own temporary and the first rename wins. Renaming a folder onto a
    non-empty one fails, so a later writer never replaces an entry that another run may be
    reading: it drops its temporary (its ids are the same) and the entry stays the winner's.
    Only an entry that did not load (`damaged`) is replaced. A cache that cannot be written (a
    full disk, a read-only folder) costs the next run the encoding, not this run: a warning.
    """
    table = pa.table({"src_ids": encoded.src.to_arrow(), "tgt_ids": encoded.tgt.to_arrow()})
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in remove_stale_temporaries(path.parent, path.name):
            log.info("removed %s, left by a run killed while caching", stale)
        prefix = f"{temporary_name(path.name, os.getpid())}-"
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=path.parent))
        datasets.Dataset(table).save_to_disk(str(tmp))
        _rename_into_place(tmp, path, damaged)
    except OSError as err:
        log.warning(
            "could not cache the encoded corpus in %s (%s); the next run encodes it again",
            *(path, err.strerror or one_line(err)),
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _rename_into_place(tmp: Path, path: Path, damaged: bool) -> None:
    try:
        tmp.rename(path)
    except OSError:
        if not path.exists():
            raise
        if not damaged:
            log.info("another run cached this corpus in %s first; keeping its entry", path)
            return
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
    log.info("cached encoded corpus in %s", path)


@dataclass(frozen=True)
class DropoutCorpus:
    """The training pairs segmented anew with BPE-dropout for each epoch (`tokenizer.bpe_dropout`).

    On a small corpus the model sees every sentence many times; a different segmentation each
    time is data augmentation that keeps it from memorising one (Provilkov et al., 2020). Epoch
    e's segmentation is a pure function of (seed, e), which exact resume relies on. A pair whose
    sampled segmentation is longer than `max_len` keeps its deterministic one for that epoch,
    so the length filter applied to `deterministic` still holds.

    Example:
        corpora = DropoutCorpus(src_texts, tgt_texts, tok, tok, deterministic, 0.1, seed=1,
                                max_len=256)
        corpus = corpora(epoch)  # an EncodedCorpus aligned with `deterministic`
    """

    src_texts: Sequence[str]  # row i is the raw text of deterministic row i
    tgt_texts: Sequence[str]
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    deterministic: EncodedCorpus
    dropout: float
    seed: int
    max_len: int  # the longest sampled row kept: data.max_len, or less to fit the token budget
    target: bool = True  # False: the target side keeps its deterministic segmentation
    # Language tags taken out of the sampled rows (source, target), as out of `deterministic`.
    tags: tuple[TypedTags, TypedTags] = (NO_TAGS, NO_TAGS)

    def __call__(self, epoch: int) -> EncodedCorpus:
        started = time.perf_counter()
        tgt = self._sample(epoch, 1) if self.target else self.deterministic.tgt
        corpus = EncodedCorpus(self._sample(epoch, 0), tgt, self.deterministic.directions)
        log.info(
            "BPE-dropout %.2f: epoch %d segmented anew in %.1f s (%+.0f%% tokens)",
            *(self.dropout, epoch, time.perf_counter() - started),
            100.0 * (corpus.n_tokens / max(self.deterministic.n_tokens, 1) - 1.0),
        )
        return corpus

    def _sample(self, epoch: int, side: int) -> TokenColumn:
        """Side 0 (source) or 1 (target) of epoch `epoch`, from its own seed."""
        texts, tokenizer, fallback = [
            (self.src_texts, self.src_tokenizer, self.deterministic.src),
            (self.tgt_texts, self.tgt_tokenizer, self.deterministic.tgt),
        ][side]
        seed = int(np.random.SeedSequence([self.seed % 2**32, epoch, side]).generate_state(1)[0])
        rows = tokenizer.encode_dropout(texts, self.dropout, seed)
        sampled, _ = TokenColumn.from_lists(rows).without_tags(self.tags[side])
        long = np.flatnonzero(sampled.lengths > self.max_len)
        if not len(long):
            return sampled
        order = np.arange(len(sampled))
        order[long] = len(sampled) + np.arange(len(long))  # `fallback`'s rows, after the sampled
        return TokenColumn.concat([sampled, fallback.select(long)]).select(order)
