"""Write a translation dataset of the `datasets` hub (WMT14 en-de) as plain text files.

WMT14 en-de (4.5M pairs, 1.4 GB of text) streams from the hub and is never held whole. Its
train split is written in a seeded random order, since the hub holds one sub-corpus
(Europarl, Common Crawl, News Commentary) after another and streaming training keeps file
order beyond its shuffle buffer. Progress goes to stderr (`progress.ProgressReport`): a bar on a
terminal, in a log file a line every PROGRESS_SECONDS such as `hub dataset wmt14/de-en split
train: read 1200000/4508785 pairs (27%), 51234.0 pairs/s, ETA 1m10s`.
"""

from __future__ import annotations

import logging
import random
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from transformer_mt.config import DataConfig
from transformer_mt.data.corpus_files import FetchError, already_complete, write_side_by_side
from transformer_mt.progress import Counted, ProgressReport

log = logging.getLogger(__name__)

SHUFFLE_SEED = 1  # the order WMT14 train is written in
# WMT14 train is shuffled through this many temporary files, one of them (~20 MB of text) in
# memory at a time.
SHUFFLE_BUCKETS = 64


@dataclass(frozen=True)
class HubCorpusSpec:
    """A translation dataset of the `datasets` hub and what a complete copy looks like."""

    hub_name: str
    hub_config: str
    hub_splits: dict[str, str]  # our split name -> the hub's
    langs: tuple[str, str]  # the two sides of every row
    line_counts: dict[str, int]  # our split name -> pairs (the hub's split sizes)


HUB_CORPORA = {
    # valid is newstest2013; test is newstest2014 whole (3,003 sentences: sacreBLEU's
    # `wmt14/full`; its `wmt14` is the 2,737 of them in the official evaluation).
    "wmt14": HubCorpusSpec(
        hub_name="wmt14",
        hub_config="de-en",
        hub_splits={"train": "train", "valid": "validation", "test": "test"},
        langs=("en", "de"),
        line_counts={"train": 4_508_785, "valid": 3000, "test": 3003},
    ),
}


def export_hub_corpus(spec: HubCorpusSpec, out_dir: Path) -> list[Path]:
    """Stream each split of `spec` from the hub into its two text files at once.

    Returns:
        The paths of all files of the corpus (written now or already complete).

    Raises:
        FetchError: a split holds another number of pairs than `spec.line_counts` says.
        DataError: the hub dataset cannot be read (offline, say).
    """
    from transformer_mt.data.dataset import stream_pairs  # `datasets` only for hub corpora

    data_cfg = DataConfig(
        format="hub",
        hub_name=spec.hub_name,
        hub_config=spec.hub_config,
        src_lang=spec.langs[0],
        tgt_lang=spec.langs[1],
        **spec.hub_splits,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, expected in spec.line_counts.items():
        targets = [out_dir / f"{split}.{lang}" for lang in spec.langs]
        paths += targets
        if already_complete(targets, expected):
            continue
        what = f"hub dataset {spec.hub_name}/{spec.hub_config} split {spec.hub_splits[split]}"
        lines = _counted_lines(
            _reported(
                ((src, tgt) for src, tgt, _ in stream_pairs(data_cfg, split)), expected, what
            ),
            expected,
            what,
        )
        if split == "train":
            with tempfile.TemporaryDirectory(prefix=".shuffle-", dir=out_dir) as tmp:
                write_side_by_side(targets, _shuffled(lines, Path(tmp)))
        else:
            write_side_by_side(targets, lines)
        log.info("%s and .%s: wrote %d lines", targets[0], spec.langs[1], expected)
    return paths


def _counted_lines(
    pairs: Iterable[tuple[str, str]], expected: int, what: str
) -> Iterator[tuple[bytes, bytes]]:
    """Each pair as two lines of bytes; a line break inside a sentence becomes a space (it
    would misalign the two files). Raises FetchError at the end when the count is off."""
    count = 0
    for src, tgt in pairs:
        count += 1
        yield _one_line(src), _one_line(tgt)
    if count != expected:
        raise FetchError(f"{what}: {count} pairs, expected {expected}")


def _one_line(text: str) -> bytes:
    return text.replace("\r", " ").replace("\n", " ").encode("utf-8") + b"\n"


def _shuffled(lines: Iterable[tuple[bytes, bytes]], tmp_dir: Path) -> Iterator[tuple[bytes, bytes]]:
    """`lines` in a seeded random order, holding one in SHUFFLE_BUCKETS of them at a time.

    The two-pass shuffle: deal every pair to a random bucket file, then read the buckets one
    after the other, each shuffled in memory. Every order of the pairs is equally likely.
    """
    rng = random.Random(SHUFFLE_SEED)
    with ExitStack() as files:
        buckets = [
            files.enter_context(open(tmp_dir / str(k), "w+b")) for k in range(SHUFFLE_BUCKETS)
        ]
        for src, tgt in lines:
            bucket = buckets[rng.randrange(SHUFFLE_BUCKETS)]
            bucket.write(src)
            bucket.write(tgt)
        for bucket in buckets:
            bucket.seek(0)
            rows = bucket.read().splitlines(keepends=True)
            bucket.truncate(0)  # its disk space back
            pairs = list(zip(rows[0::2], rows[1::2], strict=True))
            rng.shuffle(pairs)
            yield from pairs


def _reported(pairs: Iterable[tuple[str, str]], total: int, what: str) -> Iterator[tuple[str, str]]:
    """`pairs`, counted on stderr as they are read (see `ProgressReport.on_stderr`)."""
    report = ProgressReport.on_stderr(
        total, Counted(verb="read", noun="pairs", rate_unit="pairs", label=what)
    )
    try:
        for pair in pairs:
            report.update(1)
            yield pair
    finally:
        report.close()
