"""The n-best list format: `index ||| text ||| score` lines, which `tmt translate --nbest`
writes and `tmt score --nbest` reads back to rerank; it also reads Moses's and Marian's lists,
`index ||| text ||| features ||| score`, the features `name= value ...`.

The index is the source's line, from 0; the text is everything between the first and the last
separator (but for a features field before the last), so a translation holding ` ||| ` reads
back whole. A list holds each source's hypotheses on consecutive lines, as `tmt translate`,
Moses and Marian write them, in any order of the sources; that is what lets a reader hold one
source's hypotheses at a time, whatever the list's size.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from transformer_mt.errors import TmtError
from transformer_mt.text_files import iter_lines

SEPARATOR = " ||| "


def format_hypothesis(index: int, text: str, score: float) -> str:
    """One line of a list, the score with four decimals (`nan`: not scored)."""
    return SEPARATOR.join((str(index), text, f"{score:.4f}"))


@dataclass
class Hypotheses:
    """One source's hypotheses, in the list's order: `index` is the source's line (from 0)."""

    index: int
    texts: list[str] = field(default_factory=list)


def iter_nbest(path: str | Path, n_sources: int) -> Iterator[Hypotheses]:
    """Each source's hypotheses of the list at `path`, one source at a time, in the list's
    order (scores ignored); `n_sources`: the lines of the sources, which indices must name.

    Raises:
        TmtError: a line not in the format, an index that names no source line, or a source
            whose hypotheses are not on consecutive lines, naming the file and line.
    """
    seen = bytearray(n_sources)
    group: Hypotheses | None = None
    for number, line in enumerate(iter_lines(path), start=1):
        index, text = _parse(line, f"{path}:{number}", n_sources)
        if group is not None and index == group.index:
            group.texts.append(text)
            continue
        if seen[index]:
            raise TmtError(
                f"{path}:{number}: index {index} again after other indices: a list holds "
                "each source's hypotheses on consecutive lines"
            )
        seen[index] = 1
        if group is not None:
            yield group
        group = Hypotheses(index, [text])
    if group is not None:
        yield group


# An index as Moses and Marian write it: ASCII digits, spaces around them.
_INDEX = re.compile(r"\s*[0-9]+\s*")


def _parse(line: str, where: str, n_sources: int) -> tuple[int, str]:
    """(index, text) of one line; `where`: `file:line` for the error."""
    head, _, rest = line.partition(SEPARATOR)
    text, separator, _ = rest.rpartition(SEPARATOR)
    if not separator:
        raise TmtError(f"{where}: expected `index ||| text ||| score`")
    before, separator, last = text.rpartition(SEPARATOR)
    if separator and _is_features(last):
        text = before
    if not _INDEX.fullmatch(head):  # `int` also reads `1_0` and digits of other scripts
        raise TmtError(f"{where}: index {head[:40]!r} is not a whole number")
    index = int(head)
    if not 0 <= index < n_sources:
        held = f"{n_sources} (indices 0 to {n_sources - 1})" if n_sources else "no lines"
        raise TmtError(f"{where}: index {index} names no source line: the sources have {held}")
    return index, text


def _is_features(field: str) -> bool:
    """Whether `field` is a features field of named numbers: Moses' and Marian's, the name
    ending with `=` and one or more numbers after it (`F0= -1.2`, `LM0= -2.3 TM0= -1 -0.5`),
    or cdec's and Joshua's, each name and number one token (`LM0=-1.2 TM0=-3`), or a mix; or
    an empty field, as Moses writes a hypothesis without features (`0 ||| text |||  ||| -1`)."""
    named = False  # after a Moses name: its numbers may follow
    waiting = False  # a Moses name with no number yet
    for token in field.split():
        name, equals, value = token.partition("=")
        if equals and name:
            if waiting:  # a name without a value
                return False
            if value and not _is_number(value):
                return False
            named = waiting = not value
        elif named and _is_number(token):
            waiting = False
        else:
            return False
    return not waiting


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True
