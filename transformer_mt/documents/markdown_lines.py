"""Where the text of a Markdown block sits in the document, character by character.

markdown-it gives block tokens their lines (`map`), not inline tokens their columns; the
splice (markdown.py) needs the document position of every character of an inline token's
content. Each content line is the end of its source line (after `>` and list markers), a
heading's sits before a closing `#` run, and a table row's cells are found left to right
(markdown-it reads `\\|` in a cell as `|`). Front matter is blanked before parsing, keeping
every other character in place.
"""

from __future__ import annotations

import re
from typing import Any

from transformer_mt.documents.units import DocumentError

# A line end, as markdown-it reads them (its `normalize` rule turns each into "\n").
_EOL = r"(?:\r\n?|\n)"
LINE_END = re.compile(_EOL)
# Front matter: fenced by `---` (YAML, which may also close with `...`) or `+++` (TOML) lines,
# its first line a key (`title:`, `title =`), so that a document opening with a thematic break
# is not taken for it.
_KEY = r"[\w\"'-]+[ \t]*[:=]"
_FRONT_MATTER = re.compile(
    rf"(?:---[ \t]*{_EOL}(?:{_KEY}.*?{_EOL})??(?:---|\.\.\.)"
    rf"|\+\+\+[ \t]*{_EOL}(?:{_KEY}.*?{_EOL})??\+\+\+)[ \t]*(?:{_EOL}|\Z)",
    re.DOTALL,
)


def front_matter_blanked(document: str) -> str:
    """`document` with its front matter (YAML between `---` lines, or TOML between `+++`
    lines, at its very start: what Jekyll, Hugo and MkDocs read) turned into blank lines of
    the same length, so that it is neither parsed (markdown-it would read a rule and a
    heading, and the model its keys) nor translated, and every other character keeps its
    place."""
    found = _FRONT_MATTER.match(document)
    if found is None:
        return document
    blanked = re.sub(r"[^\r\n]", " ", found.group())
    return blanked + document[found.end() :]


class Lines:
    """The document's lines as markdown-it numbers them: split at each "\\r\\n", "\\r" or
    "\\n", the line end no part of the line. Split at "\\n" only, a document with "\\r" line
    ends (classic Mac OS) had fewer lines than markdown-it read, and its text was not found."""

    def __init__(self, document: str):
        self.document = document
        self.starts, self.ends = [0], []
        for found in LINE_END.finditer(document):
            self.ends.append(found.start())
            self.starts.append(found.end())
        self.ends.append(len(document))

    def start(self, line: int) -> int:
        return self.starts[line]

    def text(self, line: int) -> str:
        return self.document[self.starts[line] : self.ends[line]]


def inline_offsets(lines: Lines, token: Any) -> list[int]:
    """The document position of each character of an inline token's content (and of its end):
    content line k is the end of source line map[0] + k, its leading whitespace aside; but
    markdown-it trims a paragraph of Unicode whitespace, which may take a whole first line
    (only a no-break space), so a line that does not hold the text is passed over."""
    offsets: list[int] = []
    number = token.map[0]
    for content_line in token.content.split("\n"):
        body = content_line.lstrip(" \t")
        while body and number + 1 < token.map[1] and body not in lines.text(number):
            number += 1
        base = lines.start(number) + _column(lines.text(number), body, number)
        lead = len(content_line) - len(body)
        offsets += [base] * lead + [base + j for j in range(len(body) + 1)]
        number += 1
    return offsets


def _column(line: str, body: str, number: int) -> int:
    if line.endswith(body):
        return len(line) - len(body)
    if line.rstrip().endswith(body):  # the last line, whose trailing spaces were cut
        return len(line.rstrip()) - len(body)
    column = line.find(body)  # a heading, before its closing `#` run
    if column < 0:
        raise DocumentError(number + 1, 1, f"cannot find the text {body[:30]!r} in this line")
    return column


def cell_offsets(document: str, lines: Lines, token: Any, row_start: int) -> list[int]:
    """`inline_offsets` of a table cell, found after `row_start` in its row; a `|` of the content
    was written `\\|`."""
    number = token.map[0]
    written = token.content.replace("|", "\\|")
    row_end = lines.start(number) + len(lines.text(number))
    position = document.find(written, row_start, row_end)
    if position < 0:
        raise DocumentError(number + 1, 1, f"cannot find the cell {written[:30]!r} in this row")
    offsets = []
    for char in token.content:
        if char == "|":
            position += 1  # its backslash
        offsets.append(position)
        position += 1
    return [*offsets, position]
