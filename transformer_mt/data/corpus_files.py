"""The plain text files a fetched corpus is written as, whichever way it is fetched.

Layout, the one `DataConfig(format="text")` reads: `{out}/{split}.{lang}`, UTF-8, one sentence
a line. Every file is checked against the expected line count, written atomically (temporary
name, then rename), and skipped when it is already there with the right count, so fetching
twice is harmless and an interrupted fetch resumes. The fetchers (fetch.py, hub_export.py,
standin.py) share these rules through this module rather than each keeping its own copy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

from transformer_mt.errors import TmtError
from transformer_mt.files import atomic_open

log = logging.getLogger(__name__)


class FetchError(TmtError):
    """A corpus file cannot be downloaded, copied, made or verified."""


def already_complete(paths: Sequence[Path], expected: int) -> bool:
    """Whether every file of `paths` is there with `expected` lines (then it is kept)."""
    if not all(p.is_file() and count_file_lines(p) == expected for p in paths):
        return False
    for path in paths:
        log.info("%s: present, %d lines", path, expected)
    return True


def write_side_by_side(targets: Sequence[Path], blocks: Iterable[tuple[bytes, bytes]]) -> None:
    """Write blocks of source and target lines to the two `targets` at once; both appear only
    when every block is written (an exception, a wrong count say, leaves what was there)."""
    with atomic_open(targets[0], "wb") as src_file, atomic_open(targets[1], "wb") as tgt_file:
        for src, tgt in blocks:
            src_file.write(src)
            tgt_file.write(tgt)


def count_lines(data: bytes) -> int:
    """Lines in `data`, counting a last line without a newline too."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def count_file_lines(path: Path) -> int:
    """`count_lines` of a file, read in blocks: WMT14 train is 1.4 GB."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")
