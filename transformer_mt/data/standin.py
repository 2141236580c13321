"""The offline stand-in for WMT14 en-de: Multi30k en-de in `data/wmt14`'s layout, at any size.

For running the WMT14 recipe and measuring it at other corpus sizes without the network
(`tmt data wmt14_standin`); what it holds is `make_standin`'s docstring.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

from transformer_mt.data.corpus_files import FetchError, already_complete, write_side_by_side
from transformer_mt.errors import TmtError
from transformer_mt.text_files import read_lines

log = logging.getLogger(__name__)

STANDIN = "wmt14_standin"
STANDIN_PAIRS = 100_000  # training pairs of the stand-in unless asked for another number
# Where the stand-in's Multi30k is looked for, in order: `tmt data multi30k`'s output, then
# a mirror beside the checkout.
STANDIN_SOURCES = ("data/multi30k", "../shared/data/multi30k")
STANDIN_SPLITS = {"train": "train", "valid": "valid", "test": "test2016"}  # ours -> Multi30k's
PASS_SEED = 1  # the orders of the stand-in's passes over Multi30k train


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
        FetchError: no source folder holds Multi30k en-de, or its sides differ in length, or
            `out_dir` is that folder.
    """
    if pairs < 1:
        raise FetchError(f"{STANDIN}: {pairs} training pairs asked for; at least 1 is needed")
    source = _standin_source([Path(s) for s in sources])
    out_dir = Path(out_dir)
    if out_dir.resolve() == source.resolve():  # train.en and valid.en are names of both
        raise FetchError(
            f"{out_dir}: the stand-in would write over the Multi30k files it is made from; "
            "give it a folder of its own"
        )
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
        if already_complete(targets, total):
            continue
        orders = _repeated_orders(len(sides[0]), total) if split == "train" else [range(total)]
        blocks = ((_joined(sides[0], o), _joined(sides[1], o)) for o in orders)
        write_side_by_side(targets, blocks)
        log.info("%s and .de: wrote %d lines", targets[0], total)
    return paths


def _repeated_orders(size: int, total: int) -> Iterator[list[int]]:
    """Orders of `range(size)`, each a new seeded permutation, `total` indices in all (the last
    cut short)."""
    rng = random.Random(PASS_SEED)
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
