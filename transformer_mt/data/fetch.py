"""Fetch a known corpus into plain text files: from upstream, a local mirror or the `datasets`
hub, or make the offline stand-in for WMT14.

Output layout, the one `DataConfig(format="text")` reads: `{out}/{split}.{lang}`, UTF-8, one
sentence a line. Every file is checked against the expected line count, written atomically
(temporary name, then rename), and skipped when it is already there with the right count, so
fetching twice is harmless and an interrupted fetch resumes.

Mirrors are laid out like `shared/data/<corpus>/`: `{split}.{lang}.gz` with our split names.

WMT14 en-de (4.5M pairs) streams from the hub and is never held whole; its train split is
written in a seeded random order, since the hub holds one sub-corpus (Europarl, Common Crawl,
News Commentary) after another and streaming training keeps file order beyond its shuffle
buffer. The stand-in (`wmt14_standin`) has WMT14's layout at any size without the network:
Multi30k en-de, its train split repeated in a new seeded order each pass.
"""

from __future__ import annotations

import gzip
import logging
import random
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from transformer_mt.config import DataConfig
from transformer_mt.durations import PROGRESS_SECONDS
from transformer_mt.errors import TmtError
from transformer_mt.files import atomic_open, read_lines

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_S = 60
SHUFFLE_SEED = 1  # the order of WMT14 train and of the stand-in's passes
# WMT14 train is shuffled through this many temporary files, one of them (~20 MB of text) in
# memory at a time.
SHUFFLE_BUCKETS = 64


class FetchError(TmtError):
    """A corpus file cannot be downloaded, copied or verified."""


@dataclass(frozen=True)
class CorpusSpec:
    """Where a corpus lives upstream and what a complete copy looks like."""

    url: str  # format string with {name}: the upstream file name
    upstream_names: dict[str, str]  # our split name -> upstream file stem
    gzipped_upstream: bool  # upstream files end in .gz
    langs: tuple[str, ...]
    line_counts: dict[str, int]  # our split name -> lines in every language


@dataclass(frozen=True)
class HubCorpusSpec:
    """A translation dataset of the `datasets` hub and what a complete copy looks like."""

    hub_name: str
    hub_config: str
    hub_splits: dict[str, str]  # our split name -> the hub's
    langs: tuple[str, str]  # the two sides of every row
    line_counts: dict[str, int]  # our split name -> pairs (the hub's split sizes)


CORPORA = {
    "multi30k": CorpusSpec(
        url="https://github.com/multi30k/dataset/raw/master/data/task1/raw/{name}",
        upstream_names={"train": "train", "valid": "val", "test2016": "test_2016_flickr"},
        gzipped_upstream=True,
        langs=("en", "de", "fr", "cs"),
        line_counts={"train": 29000, "valid": 1014, "test2016": 1000},
    ),
    "small_parallel_enja": CorpusSpec(
        url="https://github.com/odashi/small_parallel_enja/raw/master/{name}",
        upstream_names={"train": "train", "valid": "dev", "test": "test"},
        gzipped_upstream=False,
        langs=("en", "ja"),
        line_counts={"train": 50000, "valid": 500, "test": 500},
    ),
}

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

STANDIN = "wmt14_standin"
STANDIN_PAIRS = 100_000  # training pairs of the stand-in unless asked for another number
# Where the stand-in's Multi30k is looked for, in order: `get_data.py multi30k`'s output, then
# a mirror beside the checkout.
STANDIN_SOURCES = ("data/multi30k", "../shared/data/multi30k")
STANDIN_SPLITS = {"train": "train", "valid": "valid", "test": "test2016"}  # ours -> Multi30k's


def fetch_corpus(name: str, out_dir: str | Path, mirror: str | Path | None = None) -> list[Path]:
    """Write every split and language of corpus `name` as plain text under `out_dir`.

    Args:
        name: a key of CORPORA (multi30k, small_parallel_enja) or HUB_CORPORA (wmt14).
        out_dir: destination folder, created if needed.
        mirror: a local folder of `{split}.{lang}.gz` files to copy instead of downloading;
            not for hub corpora.

    Returns:
        The paths of all files of the corpus (written now or already complete).

    Raises:
        FetchError: unknown corpus, download failure, missing mirror file, wrong line count.
        DataError: the hub dataset cannot be read (offline, say).
    """
    out_dir = Path(out_dir)
    if name in HUB_CORPORA:
        if mirror is not None:
            raise FetchError(f"{name}: comes from the datasets hub; there is no mirror to copy")
        return _fetch_hub(HUB_CORPORA[name], out_dir)
    if name not in CORPORA:
        known = ", ".join(sorted([*CORPORA, *HUB_CORPORA]))
        raise FetchError(f"unknown corpus {name!r}; known: {known}")
    spec = CORPORA[name]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, expected in spec.line_counts.items():
        for lang in spec.langs:
            target = out_dir / f"{split}.{lang}"
            paths.append(target)
            if _complete([target], expected):
                continue
            text = _read_source(spec, split, lang, mirror)
            found = _count_lines(text)
            if found != expected:
                raise FetchError(f"{split}.{lang}: {found} lines, expected {expected}")
            with atomic_open(target, "wb") as f:
                f.write(text)
            log.info("%s: wrote %d lines", target, found)
    return paths


def make_standin(
    out_dir: str | Path, pairs: int = STANDIN_PAIRS, sources: Sequence[str | Path] = STANDIN_SOURCES
) -> list[Path]:
    """Write the WMT14 stand-in: Multi30k en-de in `data/wmt14`'s layout, train `pairs` long.

    Train repeats Multi30k train, each pass in a new seeded order (a cut-short last pass
    included), so that a streaming run's shuffle buffers mix it like a real corpus; valid and
    test are Multi30k valid and test2016 as they are. Only Multi30k (29k pairs) is held, so
    any number of pairs fits in memory; 2M pairs (270 MB) take about 5 s.

    Args:
        out_dir: destination folder, created if needed.
        pairs: training pairs, at least 1.
        sources: folders to take Multi30k from, the first holding all of its en-de files
            (`{split}.{lang}` or `{split}.{lang}.gz`).

    Returns:
        The paths of the stand-in's six files (written now or already complete).

    Raises:
        FetchError: no source folder holds Multi30k en-de, or its sides differ in length.
    """
    if pairs < 1:
        raise FetchError(f"{STANDIN}: {pairs} training pairs asked for; at least 1 is needed")
    source = _standin_source([Path(s) for s in sources])
    out_dir = Path(out_dir)
    paths = []
    for split, source_split in STANDIN_SPLITS.items():
        sides = [_source_lines(source, f"{source_split}.{lang}") for lang in ("en", "de")]
        if len(sides[0]) != len(sides[1]):
            raise FetchError(
                f"{source}/{source_split}: {len(sides[0])} English lines, {len(sides[1])} German"
            )
        total = pairs if split == "train" else len(sides[0])
        targets = [out_dir / f"{split}.{lang}" for lang in ("en", "de")]
        paths += targets
        if _complete(targets, total):
            continue
        orders = _repeated_orders(len(sides[0]), total) if split == "train" else [range(total)]
        blocks = ((_joined(sides[0], o), _joined(sides[1], o)) for o in orders)
        _write_side_by_side(targets, blocks)
        log.info("%s and .de: wrote %d lines", targets[0], total)
    return paths


def _fetch_hub(spec: HubCorpusSpec, out_dir: Path) -> list[Path]:
    """`fetch_corpus` for a hub dataset: each split streamed into its two files at once."""
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
        if _complete(targets, expected):
            continue
        what = f"hub dataset {spec.hub_name}/{spec.hub_config} split {spec.hub_splits[split]}"
        lines = _counted_lines(
            _progress(stream_pairs(data_cfg, split), expected, what), expected, what
        )
        if split == "train":
            with tempfile.TemporaryDirectory(prefix=".shuffle-", dir=out_dir) as tmp:
                _write_side_by_side(targets, _shuffled(lines, Path(tmp)))
        else:
            _write_side_by_side(targets, lines)
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


def _write_side_by_side(targets: Sequence[Path], blocks: Iterable[tuple[bytes, bytes]]) -> None:
    """Write blocks of source and target lines to the two `targets` at once; both appear only
    when every block is written (an exception, a wrong count say, leaves what was there)."""
    with atomic_open(targets[0], "wb") as src_file, atomic_open(targets[1], "wb") as tgt_file:
        for src, tgt in blocks:
            src_file.write(src)
            tgt_file.write(tgt)


def _progress(pairs: Iterable, total: int, what: str) -> Iterable:
    """`pairs`, counted on stderr by tqdm: a bar on a terminal, a line every PROGRESS_SECONDS
    in a log file."""
    terminal = sys.stderr.isatty()
    return tqdm(
        pairs,
        total=total,
        desc=what,
        unit=" pairs",
        file=sys.stderr if terminal else _LogLines(sys.stderr),
        mininterval=0.1 if terminal else PROGRESS_SECONDS,
        ascii=not terminal,
    )


class _LogLines:
    """tqdm's output for a log file: each refresh on a line of its own. tqdm redraws its line
    after a carriage return, which a log file would keep as one ever longer line."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.strip()
        if text:
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


def _repeated_orders(size: int, total: int) -> Iterator[list[int]]:
    """Orders of `range(size)`, each a new seeded permutation, `total` indices in all (the last
    cut short)."""
    rng = random.Random(SHUFFLE_SEED)
    order = list(range(size))
    for start in range(0, total, size):
        rng.shuffle(order)
        yield order[: total - start]


def _joined(lines: list[bytes], order: Sequence[int]) -> bytes:
    return b"".join([lines[i] for i in order])  # a list: faster to join than a generator


def _standin_source(folders: Sequence[Path]) -> Path:
    """The first of `folders` that holds every Multi30k en-de file the stand-in is made from."""
    names = [f"{split}.{lang}" for split in STANDIN_SPLITS.values() for lang in ("en", "de")]
    for folder in folders:
        missing = [n for n in names if _plain_or_gz(folder, n) is None]
        if not missing:
            return folder
        log.info("%s: no %s for the stand-in", folder, ", ".join(missing))
    raise FetchError(
        f"{STANDIN}: no Multi30k en-de ({', '.join(names)}, plain or .gz) in "
        f"{' or '.join(str(f) for f in folders)}; fetch multi30k first"
    )


def _source_lines(folder: Path, name: str) -> list[bytes]:
    """The lines of `folder/name` (or `name.gz`), each encoded with its line end."""
    path = _plain_or_gz(folder, name)
    try:
        return [line.encode("utf-8") + b"\n" for line in read_lines(path)]
    except TmtError as err:
        raise FetchError(str(err)) from None


def _plain_or_gz(folder: Path, name: str) -> Path | None:
    for path in (folder / name, folder / f"{name}.gz"):
        if path.is_file():
            return path
    return None


def _read_source(spec: CorpusSpec, split: str, lang: str, mirror: str | Path | None) -> bytes:
    """The decompressed bytes of one file, from the mirror or the upstream URL."""
    if mirror is not None:
        path = Path(mirror) / f"{split}.{lang}.gz"
        try:
            return gzip.decompress(path.read_bytes())
        except FileNotFoundError:
            raise FetchError(f"{path}: not in the mirror") from None
        except (OSError, EOFError) as err:
            raise FetchError(f"{path}: not a readable gzip file ({err})") from None
    upstream = spec.upstream_names[split] + f".{lang}" + (".gz" if spec.gzipped_upstream else "")
    url = spec.url.format(name=upstream)
    log.info("downloading %s", url)
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as err:
        raise FetchError(
            f"{url}: download failed ({err}); fetch from a local mirror of the .gz files instead"
        ) from None
    if spec.gzipped_upstream:
        try:
            return gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise FetchError(f"{url}: not a gzip file ({err})") from None
    return data


def _complete(paths: Sequence[Path], expected: int) -> bool:
    """Whether every file of `paths` is there with `expected` lines (then it is kept)."""
    if not all(p.is_file() and _file_lines(p) == expected for p in paths):
        return False
    for path in paths:
        log.info("%s: present, %d lines", path, expected)
    return True


def _file_lines(path: Path) -> int:
    """`_count_lines` of a file, read in blocks: WMT14 train is 1.4 GB."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _count_lines(data: bytes) -> int:
    """Lines in `data`, counting a last line without a newline too."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
