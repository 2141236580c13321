"""The shortlist file: CTranslate2's vocabulary map format, so that one file serves our
translator and a model exported to CTranslate2 (`translate_batch(..., use_vmap=True)`).

    <source piece>\\t<target piece> <target piece> ...
    \\t<target piece> ...        an empty source: pieces every batch may produce

One line per source piece, in any order. CTranslate2 also reads keys of several source pieces
(n-grams); the shortlists written here have single pieces, and reading refuses n-grams rather
than drop them silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformer_mt.errors import TmtError
from transformer_mt.files import atomic_open, iter_lines


@dataclass(frozen=True)
class Entry:
    """One line: the target pieces allowed wherever `source` is in a batch ("" everywhere)."""

    line: int  # 1-based, for errors
    source: str
    targets: tuple[str, ...]


def write_vmap(path: str | Path, always: list[str], by_source: dict[str, list[str]]) -> None:
    """Write `always` (the empty source's line, first) and one line per source piece of
    `by_source`, in its order; under a temporary name, renamed when whole."""
    with atomic_open(path) as out:
        out.write("\t" + " ".join(always) + "\n")
        for source, targets in by_source.items():
            out.write(f"{source}\t{' '.join(targets)}\n")


def read_vmap(path: str | Path) -> list[Entry]:
    """The entries of a vocabulary map file, blank lines skipped.

    Raises:
        TmtError: the file is unreadable, or a line has no tab, a source of several pieces,
            a piece with a tab, or a source given twice (naming the file and line).
    """
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(iter_lines(path), start=1):
        if not line.strip():
            continue
        source, tab, targets = line.partition("\t")
        where = f"{path}, line {number}"
        if not tab:
            raise TmtError(f"{where}: no tab between the source piece and its target pieces")
        if " " in source or "\t" in targets:
            raise TmtError(
                f"{where}: one source piece, a tab and space-separated target pieces expected "
                "(keys of several source pieces are not supported)"
            )
        if source in seen:
            raise TmtError(f"{where}: source piece {source!r} again (first on line {seen[source]})")
        seen[source] = number
        entries.append(Entry(number, source, tuple(targets.split())))
    return entries
