"""Where a config's corpus splits are: each location (the key naming it, its path, its
direction) and the local files it is read from, checked before any work.

Apart from dataset.py, which reads them with `datasets`: a command that only needs their
names (the overwrite checks of `input_files`, which every writing command makes) does not pay
for importing `datasets`, pandas and pyarrow (0.6 s of CPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from transformer_mt.config import DataConfig
from transformer_mt.errors import TmtError
from transformer_mt.text_files import file_problem


class DataError(TmtError):
    """A corpus cannot be read: missing, empty or malformed file, unequal sides, no network."""


class Location(NamedTuple):
    """One corpus a split reads, in one direction."""

    key: str  # the config key naming it: data.valid, data.train[2]
    path: str  # a path prefix (text), a file, a hub split
    src_lang: str
    tgt_lang: str
    direction: int  # its number in `DataConfig.directions()`
    tagged: bool = False  # its sources start with BACK_TRANSLATION_TAG (`TrainSource.tagged`)


def split_files(cfg: DataConfig, split: str) -> list[Path]:
    """The local files that split `split` is read from (of every training source); none for a
    hub split.

    Raises:
        DataError: the split is not set.
    """
    return [path for location in locations(cfg, split) for path in location_files(cfg, location)]


def describe_split(cfg: DataConfig, split: str = "train") -> str:
    """`data.train` (or another `split`) as messages name it: the one path, or the sources'
    paths joined by commas (`data/a/train, data/b/train`) rather than the repr of a tuple of
    `TrainSource`s."""
    return ", ".join(location.path for location in locations(cfg, split))


def locations(cfg: DataConfig, split: str) -> list[Location]:
    """Each corpus split `split` reads: `data.valid`, say, or one `data.train[k]` per source
    of a list, each in its direction.

    Raises:
        DataError: the split is not set.
    """
    value = getattr(cfg, split)
    if value is None:
        raise DataError(f"data.{split} is not set")
    if isinstance(value, str):
        return [Location(f"data.{split}", value, cfg.src_lang, cfg.tgt_lang, 0)]
    numbers = {direction: d for d, direction in enumerate(cfg.directions())}
    located = []
    for k, source in enumerate(value):
        src, tgt = cfg.direction_of(source)
        key = f"data.{split}[{k}]"
        located.append(Location(key, source.path, src, tgt, numbers[src, tgt], source.tagged))
    return located


def location_files(cfg: DataConfig, location: Location) -> list[Path]:
    """The local files of one corpus location; none for a hub split."""
    if cfg.format == "text":
        prefix = location.path
        return [
            _resolve(f"{prefix}.{location.src_lang}"),
            _resolve(f"{prefix}.{location.tgt_lang}"),
        ]
    if cfg.format == "hub":
        return []
    return [Path(location.path)]


def check_sources(cfg: DataConfig, splits: Sequence[str] = ("train", "valid", "test")) -> None:
    """Refuse missing, empty or folder corpus files before any tokenizer training or encoding.

    Looks at every local file of the `splits` that are set and names all the faulty ones in
    one message, so that one attempt finds them all instead of one per tokenizer and encoding
    pass. Hub splits need the network and are checked when they load. Contents (UTF-8, line
    counts) are checked when each file is read.

    Args:
        splits: which of data.train / data.valid / data.test the caller will read; a run that
            is scored on data.test afterwards checks it too, before training.

    Raises:
        DataError: one line naming each faulty file and the key that points to it.
    """
    problems = [
        f"{key}={path!r}: {', '.join(faults)}" for key, path, faults in source_faults(cfg, splits)
    ]
    if problems:
        test = problems[-1].startswith("data.test=")
        hint = " (data.test: null when there is no test set)" if test else ""
        raise DataError(f"{'; '.join(problems)}; fix these paths in the config{hint}")


def source_faults(cfg: DataConfig, splits: Sequence[str]) -> list[tuple[str, str, list[str]]]:
    """What `check_sources` refuses, for a caller that words it itself (`tmt evaluate --test`
    names its flag, not the config): (key, path as given, ["FILE FAULT", ...]) for each
    faulty location of the `splits` that are set."""
    found = []
    for split in splits:
        if getattr(cfg, split) is None:
            continue
        for location in locations(cfg, split):
            paths = location_files(cfg, location)
            faults = [f"{path} {fault}" for path in paths if (fault := _file_fault(path))]
            if faults:
                found.append((location.key, location.path, faults))
    return found


def _file_fault(path: Path) -> str | None:
    """What keeps a corpus file from being read, in the words of `text_files.file_problem` (a pipe,
    a socket or a device: training reads a corpus several times), or that it is empty or
    blank."""
    if path.is_dir():
        return "is a folder, not a file"
    problem = file_problem(path)
    if problem == "missing":
        return "not found"
    if problem is not None:
        return f"is {problem}"
    if path.stat().st_size == 0:
        return "is empty"
    if path.suffix != ".gz" and not _holds_text(path):
        return "holds only blank lines"
    return None


def _holds_text(path: Path) -> bool:
    """Whether a line of the file holds more than whitespace: read up to the first that does
    (its first line, for a corpus), so a file of blank lines is refused before any work, not
    found empty after the tokenizer and the encoding."""
    with open(path, "rb") as f:
        return any(line.strip() for line in f)


def _resolve(path: str) -> Path:
    """`path`, or `path.gz` when only the compressed file exists (the shared mirror's layout)."""
    plain = Path(path)
    gz = Path(path + ".gz")
    return gz if not plain.exists() and gz.exists() else plain
