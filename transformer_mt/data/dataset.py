"""Read parallel corpora into a `datasets.Dataset` with columns `src` and `tgt`, and clean them.

Four layouts give the same two columns (see `DataConfig.format`):

- text:  `{prefix}.{src_lang}` and `{prefix}.{tgt_lang}`, one sentence a line (`.gz` accepted)
- tsv:   one file, `source<TAB>target` a line
- jsonl: one file of `{"translation": {src_lang: ..., tgt_lang: ...}}` lines (the hub's layout)
- hub:   a `datasets` hub dataset (`hub_name`, `hub_config`; hub.py), online or a local folder

`load_split` reads a split whole; `stream_pairs` yields the same pairs one at a time, for
corpora that do not fit in memory (`data.streaming`). A `data.train` that lists several sources
is read as one training set, the sources mixed by weight (`mixing.interleave`), the same pairs
in the same order both ways; each pair carries its direction's number in
`DataConfig.directions()` (a `direction` column; 0 where the split has one direction).

Local files are read and checked by `readers` rather than by `datasets`' own loaders, so that
every bad input (missing, empty, not UTF-8, unequal line counts, malformed line) is a one-line
`DataError` naming the file and, where it applies, the line.

Cleaning (`select_training_pairs`) applies to training data only; validation and test sets are
scored against their references and are never filtered.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transformer_mt.config import DataConfig, TrainSource
from transformer_mt.data.hub import load_hub, stream_hub
from transformer_mt.data.locations import (
    DataError,
    Location,
    describe_split,
    location_files,
    locations,
)
from transformer_mt.data.mixing import checked_proportions, interleave
from transformer_mt.data.readers import (
    jsonl_pair,
    read_jsonl,
    read_text_pair,
    read_tsv,
    stream_lines,
    stream_text_pair,
    tsv_pairs,
)
from transformer_mt.data.specials import BACK_TRANSLATION_TAG

T = TypeVar("T")


DirectedPair = tuple[str, str, int]  # (source, target, direction number)


def load_split(cfg: DataConfig, split: str) -> datasets.Dataset:
    """Read one split (`train`, `valid` or `test`) of the corpus described by `cfg`.

    Returns:
        A Dataset with string columns `src` and `tgt`, in file order, unfiltered; for several
        training sources, their pairs in `stream_pairs`' mixed order (repeats included), with
        an int `direction` column.

    Raises:
        DataError: one line naming the file (and line) at fault.
    """
    sources = getattr(cfg, split)
    if sources is None or isinstance(sources, str):
        (location,) = locations(cfg, split)  # DataError when the split is not set
        return _load_location(cfg, location)
    return _load_mixed(cfg, sources)


def _load_location(cfg: DataConfig, location: Location) -> datasets.Dataset:
    """The pairs of one corpus: a path prefix, a file or a hub split, as `cfg.format` says;
    a tagged one's sources start with the back-translation tag, except blank ones, which stay
    blank so that cleaning drops them as empty, as it does untagged (the tag alone is no
    source to train on)."""
    with _naming(location):
        corpus = _read_location(cfg, location)
    if not location.tagged:
        return corpus
    table = corpus.data.table
    src = table["src"]
    blank = pc.equal(pc.utf8_trim_whitespace(src), "")  # Arrow's whitespace is str.isspace's
    tagged = pc.if_else(blank, src, pc.binary_join_element_wise(BACK_TRANSLATION_TAG, src, " "))
    return datasets.Dataset(table.set_column(table.schema.get_field_index("src"), "src", tagged))


@contextlib.contextmanager
def _naming(location: Location) -> Iterator[None]:
    """A reader's DataError (a bad line, unequal line counts) of one source of a `data.train`
    list prefixed with its key and path: the message names a file, not which source of the
    list it belongs to, and the files of a prefix differ from the path the config gives."""
    try:
        yield
    except DataError as err:
        if not location.key.endswith("]"):
            raise
        raise DataError(f"{location.key}={location.path!r}: {err}") from None


def _read_location(cfg: DataConfig, location: Location) -> datasets.Dataset:
    files = location_files(cfg, location)
    langs = location.src_lang, location.tgt_lang
    if cfg.format == "text":
        return read_text_pair(*files)
    if cfg.format == "tsv":
        return read_tsv(*files)
    if cfg.format == "jsonl":
        return read_jsonl(*files, *langs)
    return load_hub(cfg.hub_name or "", cfg.hub_config, location.path, *langs)


def _load_mixed(cfg: DataConfig, sources: tuple[TrainSource, ...]) -> datasets.Dataset:
    """Every source read whole, then their rows taken in the mixed order of `stream_pairs`."""
    located = locations(cfg, "train")
    parts = [_load_location(cfg, location) for location in located]
    for location, part in zip(located, parts, strict=True):
        if not len(part):
            raise DataError(f"{location.key}={location.path!r}: no pairs")
    keys, sizes = [location.key for location in located], [len(part) for part in parts]
    bounds = [0, *itertools.accumulate(sizes)]
    rows = [functools.partial(range, start, end) for start, end in itertools.pairwise(bounds)]
    weights = checked_proportions(keys, sources, sizes, cfg.temperature, in_memory=True)
    order = np.fromiter(interleave(rows, weights), np.int64)
    # An Arrow take, not `Dataset.select`: `column_texts` reads the table beneath the rows that
    # `select` would only point at, and flattening those pointers runs at ~40k rows/s.
    tables = [
        part.data.table.append_column("direction", pa.array([location.direction] * len(part)))
        for location, part in zip(located, parts, strict=True)
    ]
    return datasets.Dataset(pa.concat_tables(tables).take(order))


def stream_pairs(cfg: DataConfig, split: str) -> Iterator[DirectedPair]:
    """The (source, target, direction) of each pair of one split, read lazily in `load_split`'s
    order.

    The streaming twin of `load_split`: the same pairs from the same files, checked by the same
    line parsers with the same messages, but holding one line at a time. Local files are read
    line by line here rather than through `datasets`' streaming loaders: two line-aligned text
    files are one stream only when read side by side, its csv loader would treat quotes in a
    sentence as CSV quoting, and a skipped line costs no parsing. Hub splits stream through
    `datasets.load_dataset(..., streaming=True)`, their natural owner.

    Several training sources are mixed as they are read (`mixing.interleave`): a source read
    to its end before the others is opened again. With `data.temperature` the sizes that the
    proportions need are counted first, in one more pass over every source.

    Raises:
        DataError: as `load_split`; unequal line counts and an empty file show when reached.
    """
    yield from _mixed(cfg, split, _stream_location)


def pair_origin(cfg: DataConfig, number: int) -> tuple[str, int]:
    """Where training pair `number` (from 0, in `stream_pairs` order, the rows of
    `load_split`) comes from, as messages name it: (`data.train[k]='path'`, its number from 1
    among that source's pairs); for a single source, (its path, number + 1). Several sources
    are read again up to that pair, so it is for error messages only."""
    if isinstance(cfg.train, str):
        return describe_split(cfg), number + 1
    origins = _mixed(cfg, "train", _numbered_pairs)
    location, index = next(itertools.islice(origins, number, None))
    return f"{location.key}={location.path!r}", index + 1


def _numbered_pairs(cfg: DataConfig, location: Location) -> Iterator[tuple[Location, int]]:
    """(location, number from 0) of each pair of one location: what `pair_origin` mixes."""
    return ((location, index) for index, _ in enumerate(_stream_location(cfg, location)))


def _mixed(
    cfg: DataConfig, split: str, read: Callable[[DataConfig, Location], Iterable[T]]
) -> Iterator[T]:
    """The items `read` gives of each location of `split`, the locations of a list mixed as
    `stream_pairs` mixes their pairs (each item stands for one pair)."""
    sources = getattr(cfg, split)
    located = locations(cfg, split)  # DataError when the split is not set
    if sources is None or isinstance(sources, str):
        yield from read(cfg, located[0])
        return
    readers = [functools.partial(read, cfg, location) for location in located]
    sizes = None
    if cfg.temperature is not None:
        sizes = [sum(1 for _ in read()) for read in readers]
    keys = [location.key for location in located]
    weights = checked_proportions(keys, sources, sizes, cfg.temperature, in_memory=False)
    yield from interleave(readers, weights, keys=keys)


def _stream_location(cfg: DataConfig, location: Location) -> Iterator[DirectedPair]:
    """The pairs of one corpus location, read lazily; its key names it in errors."""
    files = location_files(cfg, location)
    langs = location.src_lang, location.tgt_lang
    if cfg.format == "text":
        pairs = stream_text_pair(*files)
    elif cfg.format == "tsv":
        pairs = tsv_pairs(stream_lines(files[0]), files[0])
    elif cfg.format == "jsonl":
        lines = ((n, line) for n, line in stream_lines(files[0]) if line.strip())
        pairs = (jsonl_pair(line, files[0], n, *langs) for n, line in lines)
    else:
        pairs = stream_hub(cfg.hub_name or "", cfg.hub_config, location.path, *langs)
    empty = True
    tag = f"{BACK_TRANSLATION_TAG} " if location.tagged else ""
    with _naming(location):
        for src, tgt in pairs:
            empty = empty and not (src.strip() and tgt.strip())  # blank lines are no pairs
            yield (tag + src if src.strip() else src), tgt, location.direction  # as _load_location
    if empty:
        raise DataError(f"{location.key}={location.path!r}: no pairs")


def column_texts(corpus: datasets.Dataset, name: str) -> list[str]:
    """Column `name` as a Python list, in one Arrow conversion.

    `corpus[name]` is a lazy Column in datasets >= 4 whose item-by-item iteration is ~50x
    slower (0.2 s instead of 4 ms for Multi30k train).
    """
    return corpus.data.column(name).to_pylist()
