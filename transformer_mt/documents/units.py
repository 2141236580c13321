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
       it (or around it), or before the one aligned to the word after it when only that one
       touches it (`<span>` in `see <span>this`); with whitespace on both sides it stays apart.
       A line break (`<br>`, a Markdown hard break; whitespace to the model, so a sentence
       broken across lines is one unit) stays first or last in its parent if it was so in the
       source, else between two of its parent's target words

`AlignedText.pairs` link source words to target words; alignment.py makes them from the model's
cross-attention, and tests from a script. A target language written without spaces has one word
per unit, so its elements all go around the whole translation. Nothing here recurses over the
nesting of the markup (a document may nest thousands of elements in a few kilobytes): elements
are placed and written in loops over a flat list (`_Node`). `check_characters` refuses what is
not text, for both formats.
"""

from __future__ import annotations

import bisect
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
    `attach`: for markup without text, the word it sticks to; `line_break`: a line break
    (`<br>`, a Markdown hard break), which stays between words (see `render`)."""

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
        """(start, end) characters of each whitespace-separated word of `text`."""
        return [m.span() for m in _WORD.finditer(self.text)]

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

    @property
    def translatable(self) -> bool:
        """Whether a word lies outside every kept element: a unit that is only code is kept."""
        kept = [(k.start, k.end) for k in self.kept]
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
    translations = translate([region.unit.text for region in todo])
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


def render(unit: Unit, translation: AlignedText, escape: Callable[[str], str]) -> str:
    """The translation with the unit's inline markup placed (see the module docstring); each
    target word is written through `escape` (the format's own), whitespace as translated."""
    return _Placement(unit, translation, escape).write()


@dataclass
class _Node:
    """One inline element of a unit, in a flat list in source order (parents first), so that
    placing and writing walk a loop, not the call stack: a document may nest thousands deep."""

    inline: Inline
    parent: int  # the index of its parent, -1 at the top
    previous: int  # the index of the sibling before it, -1 for the first
    children: list[int] = field(default_factory=list)
    sources: range = range(0)  # the source words it holds
    need: int = 0  # target words it takes at least (`_Placement._need`)
    later: int = 0  # what the siblings after it need
    start: int = 0  # placed: target words [start, end); start == end: between two words
    end: int = 0


# What `_Placement.write` writes next: literal text, target words, or an element.
_Task = str | range | int


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
        self.nodes, self.top = _flatten(unit.inlines)
        self._measure()

    def write(self) -> str:
        """1) place every element, parents before children; 2) write the words and elements in
        target order, from a stack of what comes next."""
        for index in range(len(self.nodes)):
            self._place(index)
        parts: list[str] = []
        todo = self._sequence(self.top, 0, len(self.words))[::-1]
        while todo:
            task = todo.pop()
            if isinstance(task, str):
                parts.append(task)
            elif isinstance(task, range):
                parts.append(self._words(task.start, task.stop))
            else:
                text, inside = self._enter(self.nodes[task])
                parts.append(text)
                todo += inside[::-1]
        return "".join(parts)

    # --- placement -----------------------------------------------------------------------

    def _measure(self) -> None:
        """Each element's source words, its need, and what the siblings after it need."""
        starts = [s for s, _ in self.unit.words]
        ends = [e for _, e in self.unit.words]
        for node in self.nodes:
            first = bisect.bisect_right(ends, node.inline.start)  # the first ending after it
            last = bisect.bisect_left(starts, node.inline.end)
            # markup without text holds no word, not even one it sits inside (`hund<wbr>läuft`)
            empty = node.inline.start == node.inline.end
            node.sources = range(first, first if empty else max(first, last))
        for node in reversed(self.nodes):  # children after their parent: theirs come first
            node.need = self._need(node)
        for siblings in [self.top, *(node.children for node in self.nodes)]:
            later = 0
            for index in reversed(siblings):
                self.nodes[index].later = later
                later += self.nodes[index].need

    def _need(self, node: _Node) -> int:
        """Target words an element takes at least: a kept one or one without text none, a
        span one, or what its children take."""
        if isinstance(node.inline, Kept) or not node.sources:
            return 0
        return max(1, sum(self.nodes[child].need for child in node.children))

    def _place(self, index: int) -> None:
        """Target words of one element, within its parent's and after its previous sibling's,
        leaving enough for the siblings after it."""
        node = self.nodes[index]
        lo, hi = self._inside(node.parent)
        cursor = self.nodes[node.previous].end if node.previous >= 0 else lo
        limit = max(cursor, hi - node.later)
        node.start, node.end = self._span(node, cursor, limit)
        if isinstance(node.inline, Kept) and node.inline.line_break and node.start == node.end:
            node.start = node.end = self._between(node, cursor, limit, lo, hi)

    def _inside(self, parent: int) -> tuple[int, int]:
        if parent < 0:
            return 0, len(self.words)
        return self.nodes[parent].start, self.nodes[parent].end

    def _span(self, node: _Node, cursor: int, limit: int) -> tuple[int, int]:
        """Target words [start, end) of one element, within the free words [cursor, limit)."""
        inline = node.inline
        hits = [t for s in node.sources for t in self.targets.get(s, ()) if cursor <= t < limit]
        if hits and isinstance(inline, Kept):
            return _longest_run(sorted(set(hits)))
        if hits:
            start = min(hits)
            return start, max(max(hits) + 1, min(limit, start + node.need))
        # The fallback: where the words around it went; a span takes the free words there.
        after = isinstance(inline, Kept) and inline.attach == "next" and not node.sources
        anchor = self._anchor(inline.start, after)
        width = min(node.need, limit - cursor)
        start = min(max(anchor, cursor), limit - width)
        return start, start + width

    def _between(self, node: _Node, cursor: int, limit: int, lo: int, hi: int) -> int:
        """Where a line break goes: first or last in its parent if it was in the source, else
        where `_span` put it, moved between two of its parent's words where there are two (a
        break after the last word would end a Markdown paragraph, or cut an emphasis from its
        closing delimiter; before the first, start an empty line)."""
        if node.inline.start <= self._text_start(node.parent):
            return cursor
        if node.inline.end >= self._text_end(node.parent):
            return limit
        low, high = max(cursor, lo + 1), min(limit, hi - 1)
        return min(max(node.start, low), high) if low <= high else node.start

    def _text_start(self, parent: int) -> int:
        return self.nodes[parent].inline.start if parent >= 0 else 0

    def _text_end(self, parent: int) -> int:
        return self.nodes[parent].inline.end if parent >= 0 else len(self.unit.text)

    def _anchor(self, position: int, after: bool) -> int:
        """Where markup without text at character `position` goes: after the target words of
        the nearest aligned source word before it (or around it), else before those of the
        first aligned one after it; `after`: the other way round."""
        words = self.unit.words
        before = [
            max(self.targets[i]) + 1
            for i, (s, _) in enumerate(words)
            if s < position and self.targets.get(i)
        ]
        later = [
            min(self.targets[i])
            for i, (s, _) in enumerate(words)
            if s >= position and self.targets.get(i)
        ]
        candidates = [*later[:1], *before[-1:]] if after else [*before[-1:], *later[:1]]
        return candidates[0] if candidates else 0

    # --- writing -------------------------------------------------------------------------

    def _sequence(self, children: list[int], lo: int, hi: int) -> list[_Task]:
        """What writes target words [lo, hi) and the elements placed among them, in order."""
        tasks: list[_Task] = []
        position = lo
        for index in children:
            tasks += [range(position, self.nodes[index].start), index]
            position = self.nodes[index].end
        tasks.append(range(position, hi))
        return tasks

    def _enter(self, node: _Node) -> tuple[str, list[_Task]]:
        """What an element writes before its inside, and what writes its inside and the rest
        of it; the side effects (whitespace written, punctuation taken off words) happen in
        writing order, the order of a recursive walk."""
        inline = node.inline
        if node.start < node.end:
            gap = self._gap(node.start)  # before the words inside write theirs
            lead, trail = self._punctuation_outside(inline, node.start, node.end - 1)
            if isinstance(inline, Kept):
                return gap + lead + inline.source + trail, []  # instead of its target words
            inside = self._sequence(node.children, node.start, node.end)
            return gap + lead + inline.open, [*inside, inline.close + trail]
        if isinstance(inline, Span):
            inside = self._sequence(node.children, node.start, node.start)
            return (inline.open, [*inside, inline.close]) if inline.may_be_empty else ("", inside)
        if inline.start < inline.end or inline.attach == "apart":  # a word of its own
            if node.start > 0:
                return " " + inline.source, []
            return inline.source + (" " if self.words else ""), []
        if inline.attach == "next":
            return self._gap(node.start) + inline.source, []
        if inline.line_break:
            self.written.add(node.start)  # it stands for the whitespace after it
        return inline.source, []

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


def _flatten(inlines: Sequence[Inline]) -> tuple[list[_Node], list[int]]:
    """Every element of `inlines`, at any depth, parents before their children and siblings
    in source order; and the indices of the top ones."""
    nodes: list[_Node] = []
    top: list[int] = []
    todo = [(inline, -1) for inline in inlines[::-1]]
    while todo:
        inline, parent = todo.pop()
        siblings = nodes[parent].children if parent >= 0 else top
        nodes.append(_Node(inline, parent, siblings[-1] if siblings else -1))
        siblings.append(len(nodes) - 1)
        if isinstance(inline, Span):
            todo += [(child, len(nodes) - 1) for child in inline.children[::-1]]
    return nodes, top
