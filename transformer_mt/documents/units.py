"""Translation units: a run of text with inline markup, translated as one line, and the markup
put back around the target words aligned to the source words it held.

HTML (html.py) and Markdown (markdown.py) both cut a document into units, the text between two
block boundaries (a paragraph, a list item, a table cell, a heading), with the inline markup
inside it (`<b>`, `*emphasis*`, links, code spans). The model reads only `Unit.text`, whitespace
runs as one space; `render` writes the translation back with each inline element placed:

    1) span: from the first to the last target word aligned to any of the element's source
       words (a word is a whitespace-separated run of `Unit.text`, or of the translation)
    2) order: elements keep their source order and nesting, so every tag of the input comes out
       in the same order: siblings never overlap, a child stays inside its parent, and a span
       that would reach back over an element placed before it is cut to the words after it
    3) fallback, for an element none of whose words is aligned to a free target word: it goes
       around the free word after the target words of the source word before it, keeping
       enough free words for the elements after it (order wins over alignment: with `<b>red</b>
       <i>car</i>` translated `voiture rouge`, b gets the first word and i the second); with
       none left it is written around no word (HTML: `<b></b>`), or dropped where empty markup
       would not parse back (Markdown emphasis: `****` is not emphasis)
    4) kept elements (code, `translate="no"`, code spans): the model reads their text, so that
       the sentence stays whole, and the target words aligned to it (the longest run of
       neighbours among them: a stray link to a far word must not delete the words between)
       are replaced by the element exactly as written; with no aligned free word it is written
       as a word of its own
    5) punctuation that an element's target words start or end with, and its source text does
       not, is written outside its markup: `*Schnee*;` translated `snow,` is `*snow*,`
    6) markup without text (an image, a comment, a Markdown inline HTML tag) sticks to the
       word it touches in the source: after the target word aligned to the source word before
       it, or before the one aligned to the word after it when only that one touches it
       (`<span>` in `see <span>this`); with whitespace on both sides it stays apart

`AlignedText.pairs` link source words to target words; alignment.py makes them from the model's
cross-attention, and tests from a script. A target language written without spaces has one word
per unit, so its elements all go around the whole translation.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from transformer_mt.errors import TmtError

_WORD = re.compile(r"\S+")


class DocumentError(TmtError):
    """A document that cannot be read as its format, at a place the message names."""

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
    """How markup sits between the characters `before` and `after` it ("" at either end)."""
    if not before.isspace():
        return "previous"
    return "apart" if after.isspace() else "next"


@dataclass(frozen=True)
class Kept:
    """Markup written back exactly as in the source (`<code>x()</code>`, an image, a comment);
    `start`, `end`: the characters of `Unit.text` the model reads for it (none: start == end);
    `attach`: for markup without text, the word it sticks to."""

    source: str
    start: int
    end: int
    attach: Attach = "previous"


Inline = Span | Kept


@dataclass(frozen=True)
class Unit:
    """One line for the model (`text`) and the inline markup around parts of it."""

    text: str
    inlines: tuple[Inline, ...]

    @cached_property
    def words(self) -> list[tuple[int, int]]:
        """(start, end) characters of each whitespace-separated word of `text`."""
        return [m.span() for m in _WORD.finditer(self.text)]

    @property
    def translatable(self) -> bool:
        """Whether a word lies outside every kept element: a unit that is only code is kept."""
        kept = [(k.start, k.end) for k in _kept(self.inlines)]
        return any(not any(a <= s and e <= b for a, b in kept) for s, e in self.words)


@dataclass(frozen=True)
class AlignedText:
    """A unit's translation and its word alignment: (source word, target word) pairs."""

    text: str
    pairs: tuple[tuple[int, int], ...]


# Unit texts in, their translations (in order) out.
Translate = Callable[[Sequence[str]], list[AlignedText]]


@dataclass(frozen=True)
class Region:
    """A unit and the characters [start, end) of the document its translation replaces."""

    start: int
    end: int
    unit: Unit


def translate_regions(
    document: str,
    regions: Sequence[Region],
    translate: Translate,
    write: Callable[[Unit, AlignedText], str],
) -> str:
    """`document` with each translatable region replaced by `write(unit, its translation)`;
    the units are translated in one call, so that they share batches. Regions are in order."""
    todo = [region for region in regions if region.unit.translatable]
    translations = translate([region.unit.text for region in todo])
    parts, position = [], 0
    for region, translation in zip(todo, translations, strict=True):
        parts += [document[position : region.start], write(region.unit, translation)]
        position = region.end
    parts.append(document[position:])
    return "".join(parts)


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

    def kept(self, source: str, text: str = "", attach: Attach = "previous") -> None:
        """Markup written back as `source`; the model reads `text` for it."""
        start = len(self._chars)
        self.text(text)
        if start < len(self._chars) and self._chars[start] == " ":
            start += 1  # the space in front of its text is not its own
        self._siblings().append(Kept(source, start, len(self._chars), attach))

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


def render(unit: Unit, translation: AlignedText, escape: Callable[[str], str]) -> str:
    """The translation with the unit's inline markup placed (see the module docstring); each
    target word is written through `escape` (the format's own), whitespace as translated."""
    return _Placement(unit, translation, escape).write()


@dataclass
class _Placed:
    inline: Inline
    start: int  # target words [start, end); start == end: between two words
    end: int
    children: list[_Placed]


class _Placement:
    def __init__(self, unit: Unit, translation: AlignedText, escape: Callable[[str], str]):
        self.unit, self.escape = unit, escape
        matches = list(_WORD.finditer(translation.text))
        self.words = [m.group() for m in matches]
        # The whitespace in front of each target word, as translated ("" for the first).
        ends = [0, *(m.end() for m in matches)]
        self.gaps = [
            translation.text[ends[i] : m.start()] if i else "" for i, m in enumerate(matches)
        ]
        self.written: set[int] = set()  # target words whose whitespace is written
        self.targets: dict[int, set[int]] = {}
        for source, target in translation.pairs:
            self.targets.setdefault(source, set()).add(target)

    def write(self) -> str:
        n = len(self.words)
        return self._write(self._place(self.unit.inlines, 0, n), 0, n)

    # --- placement -----------------------------------------------------------------------

    def _place(self, inlines: Sequence[Inline], lo: int, hi: int) -> list[_Placed]:
        """Target word spans of sibling `inlines` within words [lo, hi), in source order."""
        needs = [self._need(inline) for inline in inlines]
        placed, cursor = [], lo
        for i, inline in enumerate(inlines):
            limit = max(cursor, hi - sum(needs[i + 1 :]))  # words left for the later siblings
            start, end = self._span(inline, cursor, limit)
            children = []
            if isinstance(inline, Span):
                children = self._place(inline.children, start, end)
            placed.append(_Placed(inline, start, end, children))
            cursor = end
        return placed

    def _span(self, inline: Inline, cursor: int, limit: int) -> tuple[int, int]:
        """Target words [start, end) of one element, within the free words [cursor, limit)."""
        sources = self._source_words(inline)
        hits = [t for s in sources for t in self.targets.get(s, ()) if cursor <= t < limit]
        need = self._need(inline)
        if hits and isinstance(inline, Kept):
            return _longest_run(sorted(set(hits)))
        if hits:
            start = min(hits)
            return start, max(max(hits) + 1, min(limit, start + need))
        # The fallback: where the words around it went; a span takes the free words there.
        after = isinstance(inline, Kept) and inline.attach == "next" and not sources
        anchor = self._anchor(inline.start, after)
        width = min(need, limit - cursor)
        start = min(max(anchor, cursor), limit - width)
        return start, start + width

    def _need(self, inline: Inline) -> int:
        """Target words an element takes at least: a kept one or one without text none, a
        span one, or what its children take."""
        if isinstance(inline, Kept) or not self._source_words(inline):
            return 0
        return max(1, sum(self._need(child) for child in inline.children))

    def _source_words(self, inline: Inline) -> list[int]:
        return [
            i for i, (s, e) in enumerate(self.unit.words) if s < inline.end and inline.start < e
        ]

    def _anchor(self, position: int, after: bool) -> int:
        """Where markup without text at character `position` goes: after the target words of
        the nearest aligned source word before it, else before those of the first aligned
        one after it; `after`: the other way round."""
        words = self.unit.words
        before = [
            max(self.targets[i]) + 1
            for i, (_, e) in enumerate(words)
            if e <= position and self.targets.get(i)
        ]
        later = [
            min(self.targets[i])
            for i, (s, _) in enumerate(words)
            if s >= position and self.targets.get(i)
        ]
        candidates = [*later[:1], *before[-1:]] if after else [*before[-1:], *later[:1]]
        return candidates[0] if candidates else 0

    # --- writing -------------------------------------------------------------------------

    def _write(self, placed: list[_Placed], lo: int, hi: int) -> str:
        """Target words [lo, hi) and the elements placed among them, in order."""
        parts, position = [], lo
        for p in placed:
            parts += [self._words(position, p.start), self._element(p)]
            position = p.end
        parts.append(self._words(position, hi))
        return "".join(parts)

    def _element(self, p: _Placed) -> str:
        inline = p.inline
        if p.start < p.end:
            gap = self._gap(p.start)  # before the words inside write theirs
            lead, trail = self._punctuation_outside(inline, p.start, p.end - 1)
            if isinstance(inline, Kept):
                return gap + lead + inline.source + trail  # instead of its target words
            inner = self._write(p.children, p.start, p.end)
            return gap + lead + inline.open + inner + inline.close + trail
        if isinstance(inline, Span):
            inner = self._write(p.children, p.start, p.start)
            return inline.open + inner + inline.close if inline.may_be_empty else inner
        if inline.start < inline.end or inline.attach == "apart":  # a word of its own
            if p.start > 0:
                return " " + inline.source
            return inline.source + (" " if self.words else "")
        if inline.attach == "next":
            return self._gap(p.start) + inline.source
        return inline.source

    def _punctuation_outside(self, inline: Inline, first: int, last: int) -> tuple[str, str]:
        """Punctuation that an element's target words start or end with and its source text
        does not, taken off those words to be written outside its markup: `*snow*,` for
        `*Schnee*;` translated `snow,` (never a whole word)."""
        text = self.unit.text[inline.start : inline.end].strip()
        lead = trail = ""
        word = self.words[last]
        if text and not _punctuation(text[-1]) and not all(map(_punctuation, word)):
            cut = len(word)
            while _punctuation(word[cut - 1]):
                cut -= 1
            self.words[last], trail = word[:cut], word[cut:]
        word = self.words[first]
        if text and not _punctuation(text[0]) and not all(map(_punctuation, word)):
            cut = 0
            while _punctuation(word[cut]):
                cut += 1
            lead, self.words[first] = word[:cut], word[cut:]
        return self.escape(lead) if lead else "", self.escape(trail) if trail else ""

    def _words(self, start: int, end: int) -> str:
        return "".join(self._gap(i) + self.escape(self.words[i]) for i in range(start, end))

    def _gap(self, i: int) -> str:
        """The whitespace in front of target word i, the first time it is written."""
        if i in self.written or i >= len(self.words):
            return ""
        self.written.add(i)
        return self.gaps[i]


def _punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


def _longest_run(words: list[int]) -> tuple[int, int]:
    """[start, end) of the first longest run of consecutive numbers in sorted `words`."""
    best = run = (words[0], words[0] + 1)
    for word in words[1:]:
        run = (run[0], word + 1) if word == run[1] else (word, word + 1)
        if run[1] - run[0] > best[1] - best[0]:
            best = run
    return best


def _kept(inlines: Sequence[Inline]) -> list[Kept]:
    found: list[Kept] = []
    for inline in inlines:
        if isinstance(inline, Kept):
            found.append(inline)
        else:
            found += _kept(inline.children)
    return found
