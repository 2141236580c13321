"""Translation units: a run of text with inline markup, translated as one line.

HTML (html.py) and Markdown (markdown.py) both cut a document into units, the text between two
block boundaries (a paragraph, a list item, a table cell, a heading), with the inline markup
inside it (`<b>`, `*emphasis*`, links, code spans). What both formats share lives here: the
unit and its markup (`Unit`, `Span`, `Kept`), built piece by piece in source order
(`UnitBuilder`); a translation with its word alignment (`AlignedText`); the regions of a
document that units replace, all translated in one call (`translate_regions`, which hands the
translator their `UnitTexts`); and the refusal of what is not text (`check_characters`,
`DocumentError`). Putting the markup back around the translated words is placement.py's
(`render`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from transformer_mt.errors import TmtError
from transformer_mt.writing_systems import UNSPACED_CHARACTER, has_letter

# A word of a unit's text, or of its translation: one character of a script written without
# spaces (Chinese, Japanese), or a run of other characters up to whitespace or one of those.
# Markup goes around words: cut at spaces only, a Japanese sentence would be one word, and
# markup around one of its words would go around all of it.
WORD = re.compile(rf"{UNSPACED_CHARACTER}|(?:(?!{UNSPACED_CHARACTER})\S)+")


class DocumentError(TmtError):
    """A document that cannot be read as its format, at a place the message names;
    `document`: which of several documents, where a caller read several (None: one)."""

    document: int | None = None

    def __init__(self, line: int, column: int, reason: str):
        self.line, self.column, self.reason = line, column, reason
        super().__init__(f"line {line}, column {column}: {reason}")


@dataclass(frozen=True)
class Span:
    """Inline markup around translated text: `<b>` ... `</b>`, `[` ... `](url)`.

    `start`, `end`: its characters in `Unit.text`; `may_be_empty`: written around no word when
    none is left for it (else its markup is dropped and its children written alone).
    """

    open: str
    close: str
    start: int
    end: int
    may_be_empty: bool
    children: tuple[Inline, ...] = ()


# Which word markup without text touches in the source: the one before it (or none), the one
# after it only, or neither (whitespace on both sides).
Attach = Literal["previous", "next", "apart"]


def attachment(before: str, after: str) -> Attach:
    """How markup sits between the characters `before` and `after` it: "" where its unit has
    no text on that side (the markup of the block around it is no word to stick to)."""
    if before and not before.isspace():
        return "previous"
    return "next" if after and not after.isspace() else "apart"


@dataclass(frozen=True)
class Kept:
    """Markup written back exactly as in the source (`<code>x()</code>`, an image, a comment);
    `start`, `end`: the characters of `Unit.text` the model reads for it (none: start == end);
    `attach`: for markup without text, the word it sticks to; `line_break`: a line break
    (`<br>`, a Markdown hard break), which stays between words (see placement.py)."""

    source: str
    start: int
    end: int
    attach: Attach = "previous"
    line_break: bool = False


Inline = Span | Kept


@dataclass(frozen=True)
class Unit:
    """One line for the model (`text`) and the inline markup around parts of it."""

    text: str
    inlines: tuple[Inline, ...]

    @cached_property
    def words(self) -> list[tuple[int, int]]:
        """(start, end) characters of each word of `text` (`WORD`)."""
        return [m.span() for m in WORD.finditer(self.text)]

    @cached_property
    def kept(self) -> list[Kept]:
        """Its kept elements, at any depth, in source order."""
        found: list[Kept] = []
        todo = list(self.inlines[::-1])
        while todo:  # a loop, not recursion: markup may nest thousands deep
            inline = todo.pop()
            if isinstance(inline, Kept):
                found.append(inline)
            else:
                todo += inline.children[::-1]
        return found

    @cached_property
    def kept_spans(self) -> tuple[tuple[int, int], ...]:
        """(start, end) characters of `text` that kept elements hold, in order: the model
        reads them, but they are written back as in the source, never translated."""
        return tuple((k.start, k.end) for k in self.kept if k.start < k.end)

    @property
    def translatable(self) -> bool:
        """Whether a word with a letter lies outside every kept element: a unit that is only
        code is kept as written, and so is one of numbers and symbols (a table's `2024`,
        `12:30`), with its markup, as a sentence without a letter is
        (`inference.translation.kept_as_written`). Kept elements with text never overlap (one
        is never inside another), so each word is looked up among their starts: time W log K,
        not W x K (a page of 30,000 `<br>`)."""
        kept = self.kept_spans
        starts = [start for start, _ in kept]
        for start, end in self.words:
            if not has_letter(self.text[start:end]):
                continue
            holder = bisect.bisect_right(starts, start) - 1
            if holder < 0 or kept[holder][1] < end:
                return True
        return False


@dataclass(frozen=True)
class AlignedText:
    """A unit's translation and its word alignment: (source word, target word) pairs."""

    text: str
    pairs: tuple[tuple[int, int], ...]


class UnitTexts(Sequence[str]):
    """The texts of units, as a translator reads them, and each one's kept characters
    (`Unit.kept_spans`), where a glossary finds no term. A sequence of the texts, so that a
    translator that needs only the texts (the server's, whose translations are made before the
    document is written) takes it as it takes a list."""

    def __init__(self, units: Sequence[Unit]):
        self.units = tuple(units)

    def __len__(self) -> int:
        return len(self.units)

    def __getitem__(self, index):  # int -> str, slice -> list[str], as a list's
        if isinstance(index, slice):
            return [unit.text for unit in self.units[index]]
        return self.units[index].text

    def kept_spans(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """The kept characters of each text (`Texts.kept`)."""
        return tuple(unit.kept_spans for unit in self.units)


# Unit texts in, their translations (in order) out.
Translate = Callable[[UnitTexts], list[AlignedText]]


@dataclass(frozen=True)
class Region:
    """A unit and the characters [start, end) of the document its translation replaces."""

    start: int
    end: int
    unit: Unit


@dataclass(frozen=True)
class Replacement:
    """Characters [start, end) of a document outside every region, and what the translated
    document holds there instead (an HTML root's `lang` value)."""

    start: int
    end: int
    text: str


def translate_regions(
    document: str,
    regions: Sequence[Region],
    translate: Translate,
    write: Callable[[Unit, AlignedText], str],
    replacements: Sequence[Replacement] = (),
) -> str:
    """`document` with each translatable region replaced by `write(unit, its translation)`,
    and `replacements` made; the units are translated in one call, so that they share
    batches. Regions are in order."""
    todo = [region for region in regions if region.unit.translatable]
    translations = translate(UnitTexts([region.unit for region in todo]))
    changes = [
        Replacement(region.start, region.end, write(region.unit, translation))
        for region, translation in zip(todo, translations, strict=True)
    ]
    parts, position = [], 0
    for change in sorted([*changes, *replacements], key=lambda change: change.start):
        parts += [document[position : change.start], change.text]
        position = change.end
    parts.append(document[position:])
    return "".join(parts)


# Control characters (Unicode's Cc) but tab, line feed, form feed and carriage return, the
# whitespace of HTML and CommonMark; and lone surrogates (a JSON body's "\ud800").
_NOT_TEXT = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def not_text(text: str) -> bool:
    """Whether `text` holds a character `check_characters` refuses."""
    return _NOT_TEXT.search(text) is not None


def check_characters(document: str) -> None:
    """Refuse a document holding a character that is not text. HTML calls control characters
    in its input a parse error and CommonMark replaces NUL, so the markup would not be read
    as written, and the model has never seen them.

    Raises:
        DocumentError: the first such character, by code point, line and column.
    """
    found = _NOT_TEXT.search(document)
    if found is None:
        return
    position = found.start()
    line = document.count("\n", 0, position) + 1
    column = position - document.rfind("\n", 0, position)
    char = found.group()
    kind = "a lone surrogate" if char >= "\ud800" else "a control character"
    raise DocumentError(line, column, f"U+{ord(char):04X} is {kind}, not text: remove it")


class UnitBuilder:
    """Builds a `Unit` from a format's pieces in source order: text, markup opened and closed
    around text (properly nested), and kept markup."""

    def __init__(self) -> None:
        self._chars: list[str] = []
        self._space = False  # whitespace since the last character: one space before the next
        self._open: list[_Opening] = []
        self._top: list[Inline] = []

    def text(self, text: str) -> None:
        """Text the model reads; whitespace runs become one space, none at either end."""
        for char in text:
            if char.isspace():
                self._space = True
                continue
            if self._space and self._chars:
                self._chars.append(" ")
            self._space = False
            self._chars.append(char)

    def open(self, markup: str, may_be_empty: bool) -> None:
        self._open.append(_Opening(markup, may_be_empty, len(self._chars)))

    def close(self, markup: str) -> None:
        """Closes the innermost open markup."""
        o = self._open.pop()
        span = Span(o.markup, markup, o.start, len(self._chars), o.may_be_empty, tuple(o.children))
        self._siblings().append(span)

    def kept(
        self, source: str, text: str = "", attach: Attach = "previous", line_break: bool = False
    ) -> None:
        """Markup written back as `source`; the model reads `text` for it, and a line break
        as whitespace (`mann<br>zwei` is two words)."""
        start = len(self._chars)
        self.text(text)
        if start < len(self._chars) and self._chars[start] == " ":
            start += 1  # the space in front of its text is not its own
        self._siblings().append(Kept(source, start, len(self._chars), attach, line_break))
        self._space = self._space or line_break

    def build(self) -> Unit:
        if self._open:
            raise ValueError(f"markup left open: {self._open[-1].markup!r}")
        return Unit("".join(self._chars), tuple(self._top))

    def _siblings(self) -> list[Inline]:
        return self._open[-1].children if self._open else self._top


@dataclass
class _Opening:
    markup: str
    may_be_empty: bool
    start: int
    children: list[Inline] = field(default_factory=list)
