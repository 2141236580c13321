"""The shortlist file: CTranslate2's vocabulary map format, so that one file serves our
translator and a model exported to CTranslate2 (`translate_batch(..., use_vmap=True)`).

    #vocabularies\\tsource=<digest> target=<digest>      the model it was made for (line 1)
    <source piece>\\t<target piece> <target piece> ...
    \\t<target piece> ...        an empty source: pieces every batch may produce

One line per source piece, in any order. CTranslate2 also reads keys of several source pieces
(n-grams); the shortlists written here have single pieces, and reading refuses n-grams rather
than drop them silently.

The first line names the vocabularies the shortlist was made for (`Vocabularies`), so that a
shortlist of another model is refused even where its pieces happen to exist in this model's
vocabularies (then it would quietly keep the wrong pieces). CTranslate2 reads that line as one
more source piece, `#vocabularies`, whose target pieces are unknown to it: should a source ever
hold that piece, it would allow the unknown piece, which CTranslate2 always allows anyway. A
file without the line (made elsewhere, or by an older `tmt shortlist`) still reads; only its
pieces can be checked against a model (`select.Shortlist.load`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import TmtError, printable
from transformer_mt.files import atomic_open
from transformer_mt.text_files import file_problem, iter_lines

VOCABULARIES_KEY = "#vocabularies"
DIGEST_CHARS = 16  # hex digits of SHA-256 kept: 64 bits tell vocabularies apart


@dataclass(frozen=True)
class Entry:
    """One line: the target pieces allowed wherever `source` is in a batch ("" everywhere)."""

    line: int  # 1-based, for errors
    source: str
    targets: tuple[str, ...]


@dataclass(frozen=True)
class Vocabularies:
    """The vocabularies a shortlist is for: a digest of each side's pieces in id order.

    Pieces and their ids are what a shortlist relies on, so two models whose vocabularies
    number the same pieces alike (a student that kept its teacher's tokenizer) share one.
    """

    source: str
    target: str

    @classmethod
    def of(cls, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer) -> Vocabularies:
        return cls(_digest(src_tokenizer), _digest(tgt_tokenizer))

    def line(self) -> str:
        return f"{VOCABULARIES_KEY}\tsource={self.source} target={self.target}"

    def differing(self, other: Vocabularies) -> list[str]:
        """The sides ("source", "target") on which `other` names other vocabularies."""
        return [
            side for side in ("source", "target") if getattr(self, side) != getattr(other, side)
        ]


@dataclass(frozen=True)
class Vmap:
    """A vocabulary map file's contents; `vocabularies` None: the file does not name them."""

    entries: list[Entry]
    vocabularies: Vocabularies | None


def write_vmap(
    path: str | Path,
    always: list[str],
    by_source: dict[str, list[str]],
    vocabularies: Vocabularies | None = None,
) -> None:
    """Write the `vocabularies` line (when given), `always` (the empty source's line) and one
    line per source piece of `by_source`, in its order; under a temporary name, renamed when
    whole."""
    with atomic_open(path) as out:
        if vocabularies is not None:
            out.write(vocabularies.line() + "\n")
        out.write("\t" + " ".join(always) + "\n")
        for source, targets in by_source.items():
            out.write(f"{source}\t{' '.join(targets)}\n")


def read_vmap(path: str | Path) -> Vmap:
    """The entries of a vocabulary map file, blank lines skipped, and the vocabularies its
    first line names.

    Raises:
        TmtError: the file is missing, not a regular file (a FIFO would block) or
            unreadable, or a line has no tab, a source of several pieces,
            a piece with a tab, or a source given twice, or the vocabularies line is not
            `#vocabularies<TAB>source=DIGEST target=DIGEST` (naming the file and line).
    """
    problem = file_problem(Path(path))
    if problem is not None and problem != "missing":  # `iter_lines` says "file not found"
        raise TmtError(f"{path}: {problem}; a shortlist is a file `tmt shortlist` writes")
    entries: list[Entry] = []
    vocabularies = None
    seen: dict[str, int] = {}
    for number, line in enumerate(iter_lines(path), start=1):
        if not line.strip():
            continue
        source, tab, targets = line.partition("\t")
        where = f"{path}:{number}"
        if number == 1 and source == VOCABULARIES_KEY:
            vocabularies = _vocabularies(targets, where)
            continue
        if not tab:
            raise TmtError(f"{where}: no tab between the source piece and its target pieces")
        if " " in source or "\t" in targets:
            raise TmtError(
                f"{where}: one source piece, a tab and space-separated target pieces expected "
                "(keys of several source pieces are not supported)"
            )
        if source in seen:
            raise TmtError(
                f"{where}: source piece {printable(repr(source), 100)} again "
                f"(first on line {seen[source]})"
            )
        seen[source] = number
        entries.append(Entry(number, source, tuple(targets.split())))
    return Vmap(entries, vocabularies)


def _vocabularies(text: str, where: str) -> Vocabularies:
    """The `source=DIGEST target=DIGEST` of a vocabularies line."""
    fields = dict(part.partition("=")[::2] for part in text.split())
    if fields.keys() != {"source", "target"} or not all(fields.values()):
        raise TmtError(
            f"{where}: {VOCABULARIES_KEY} expects 'source=DIGEST target=DIGEST', got "
            f"{printable(repr(text), 100)}"
        )
    return Vocabularies(fields["source"], fields["target"])


def _digest(tokenizer: Tokenizer) -> str:
    """The first DIGEST_CHARS hex digits of the SHA-256 of the tokenizer's pieces in id order,
    one a line."""
    pieces = (tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size))
    return hashlib.sha256("\n".join(pieces).encode(errors="surrogatepass")).hexdigest()[
        :DIGEST_CHARS
    ]
