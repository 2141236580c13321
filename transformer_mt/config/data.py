"""DataConfig: where the parallel corpus lives and how its pairs are cleaned; TrainSource:
one of several training corpora mixed by weight."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from transformer_mt.config.checks import check_language_code, check_positive
from transformer_mt.config.errors import ConfigError

# Reader processes a rank may start: each is a process of its own (100,000 would fork until
# memory runs out), and a few keep any training step fed.
MAX_WORKERS = 64


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
    # Synthetic pairs, e.g. back-translated (docs/backtranslation.md): each source sentence
    # starts with the tag piece `<BT>` (tagged back-translation, Caswell et al., 2019), so the
    # model can tell machine-made sources from real ones; real input is never tagged.
    tagged: bool = False


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
        for key in ("src_lang", "tgt_lang"):
            code = getattr(self, key)
            check_language_code(code, f"data.{key}={code!r}", f"data.{key}")
        if self.src_lang == self.tgt_lang:
            raise ConfigError(
                f"data.src_lang and data.tgt_lang are both '{self.src_lang}'",
                keys=("data.src_lang", "data.tgt_lang"),
            )
        if self.format == "hub" and not self.hub_name:
            raise ConfigError(
                "data.hub_name is required when data.format is 'hub'",
                keys=("data.hub_name", "data.format"),
            )
        check_positive(self, "data", ["max_len", "max_len_ratio", "shuffle_buffer"])
        if self.max_len_ratio < 1:  # a ratio of the longer side to the shorter is never below 1
            raise ConfigError(
                f"data.max_len_ratio={self.max_len_ratio:g} must be >= 1: it bounds the longer "
                "side over the shorter, so below 1 cleaning drops every pair",
                keys=("data.max_len_ratio",),
            )
        if self.temperature is not None and not 0 < self.temperature < math.inf:
            raise ConfigError(
                f"data.temperature={self.temperature:g} must be > 0 and finite",
                keys=("data.temperature",),
            )
        if not 0 <= self.workers <= MAX_WORKERS:
            raise ConfigError(
                f"data.workers={self.workers} must be in [0, {MAX_WORKERS}]", keys=("data.workers",)
            )
        self._check_train()

    def _check_train(self) -> None:
        """Refuse a list of training sources that names no corpus or cannot be mixed."""
        if isinstance(self.train, str):
            return
        if not self.train:
            raise ConfigError(
                "data.train: the list of sources is empty; name a corpus, or list {path, weight}s",
                keys=("data.train",),
            )
        for k, source in enumerate(self.train):
            self._check_source(k, source)
        trained = [self.direction_of(source) for source in self.train]
        if (self.src_lang, self.tgt_lang) not in trained:
            raise ConfigError(
                f"data.src_lang->data.tgt_lang {self.src_lang}->{self.tgt_lang} (the direction "
                "of valid and test) is not one of data.train's directions ("
                f"{', '.join(dict.fromkeys(f'{s}->{t}' for s, t in trained))})",
                keys=("data.src_lang", "data.tgt_lang", "data.train"),
            )

    def _check_source(self, k: int, source: TrainSource) -> None:
        """Refuse training source `k` when it names no corpus, cannot be weighed, or
        translates a language into itself."""
        name = f"data.train[{k}]"
        if not source.path.strip():
            raise ConfigError(f"{name}.path is empty; name a corpus", keys=(f"{name}.path",))
        if not source.weight > 0:  # NaN too
            raise ConfigError(
                f"{name}.weight={source.weight:g} must be > 0", keys=(f"{name}.weight",)
            )
        if math.isinf(source.weight):
            raise ConfigError(
                f"{name}.weight={source.weight:g} must be finite", keys=(f"{name}.weight",)
            )
        for key in ("src_lang", "tgt_lang"):
            code = getattr(source, key)
            if code is not None:
                check_language_code(code, f"{name}.{key}={code!r}", f"{name}.{key}")
        src, tgt = self.direction_of(source)
        if src == tgt:
            raise ConfigError(f"{name}: src_lang and tgt_lang are both {src!r}", keys=(name,))

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

    def has_tagged_source(self) -> bool:
        """Whether a training source is tagged (`TrainSource.tagged`): the tokenizer then
        learns the tag as one piece."""
        return not isinstance(self.train, str) and any(s.tagged for s in self.train)
