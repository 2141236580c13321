"""HTML documents and fragments: text translated; tags, attributes, comments, entities and
whitespace outside the translated text kept byte for byte.

Parser: the standard library's `html.parser`, a tokenizer kept with Python itself, tolerant of
fragments and of what browsers accept (`<p>` without `</p>`, unquoted attributes, any case),
which tells where each tag, text run and character reference starts. That is what keeping the
input needs: the output is the input with the text of each unit replaced, so that the tags,
attributes, quoting, comments, doctype and indentation come out as written. Tree builders
(lxml, html5lib, BeautifulSoup, selectolax) give a tree to serialise again, not positions, and
serialising changes quoting, entities and implied tags (html5lib adds `<html><head><body>`
around a fragment); none was needed on top, so HTML needs no extra.

`html.parser` never fails, so the structure is checked here, by HTML's rules for end tags an
author may leave out (`p`, `li`, `td`, `tr`, `option`...): a document is refused, with its
line and column, when an end tag closes nothing (but a `</p>`, which HTML reads as an empty
paragraph), closes an element other than one of those
(crossing tags: `<b><i>x</b></i>`), an element other than those is never closed, or a `<` starts
markup that never ends. What passes is translated with its structure unchanged, so the output
is well-formed wherever the input was.

Units (units.py): the text between two block boundaries. Inline elements (`INLINE`) are placed
(placement.py) around the aligned target words; `INLINE_KEPT` elements and inline elements with
`translate="no"` are kept as written in place of their text's translation; images, `<wbr>`,
`<input>`, `<embed>`, comments and `INLINE_GRAPHICS` (`<svg>`, `<math>`, whole) go after the
word before them, and a `<br>` between the words
around it (a line break inside a sentence leaves it one unit); every other tag (blocks, `<hr>`,
tables, unknown elements) is a boundary. `KEPT` elements and any other element with
`translate="no"`, or a `lang` naming a language other than the source (html_languages.py), are
left alone with their whole subtree. Translated text is written with `&`
and `<` escaped, and with any character the input wrote as a named or numeric reference
(`&copy;`, `&#8212;`) written so again. Attribute values (`title`, `alt`) are not translated,
but the root `<html>`'s `lang` and `xml:lang` become the target language, as do those of
passages in the source language. A control character
is refused (units.check_characters). The structure check and the units take time linear in the
input however deep it nests.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Literal

from transformer_mt.documents.html_events import RAW_TEXT, Event, tokenize
from transformer_mt.documents.html_languages import foreign, target_languages
from transformer_mt.documents.placement import render
from transformer_mt.documents.units import (
    AlignedText,
    DocumentError,
    Region,
    Translate,
    Unit,
    UnitBuilder,
    attachment,
    translate_regions,
)

# Elements whose end tag HTML lets an author leave out: the element ends where its parent ends
# or where a start tag in IMPLIED_ENDS says.
OPTIONAL_END = frozenset({
    "html", "head", "body", "li", "dt", "dd", "p", "rt", "rp", "optgroup", "option",
    "colgroup", "caption", "thead", "tbody", "tfoot", "tr", "td", "th",
})  # fmt: skip
# Phrasing elements whose text is translated: placed around the aligned target words.
INLINE = frozenset({
    "a", "abbr", "b", "bdi", "bdo", "big", "cite", "data", "del", "dfn", "em", "font", "i",
    "ins", "label", "mark", "q", "s", "small", "span", "strike", "strong", "sub", "sup", "time",
    "tt", "u",
})  # fmt: skip
# Phrasing elements kept as written (code, keyboard input, program output, variables).
INLINE_KEPT = frozenset({"code", "kbd", "samp", "var"})
# Phrasing elements without text, kept beside the word they touch; a `<br>` inside a sentence
# is a line break in it, not the end of a unit (units.Kept.line_break).
INLINE_EMPTY = frozenset({"img", "wbr", "br", "input", "embed"})
# What an empty (self-closing) tag of these names is to a unit: markup without text, kept
# beside the word it touches; `<i class="icon"/>`, as written in XHTML and templates, is
# `<i class="icon"></i>`, not the end of a sentence.
_WORDLESS = INLINE_EMPTY | INLINE | INLINE_KEPT
# Phrasing elements of markup, not text (an icon, a formula): kept as written, whole, beside
# the word they touch, their text never read; a page's inline icon does not end its sentence.
INLINE_GRAPHICS = frozenset({"svg", "math"})
# Phrasing elements kept as written where they stand (role `kept_inline`), and every phrasing
# element (one with `translate="no"` is kept where it stands, not as a block).
_KEPT_INLINE = INLINE_KEPT | INLINE_GRAPHICS
_PHRASING = INLINE | _KEPT_INLINE
# Elements left alone with their whole subtree.
KEPT = frozenset({"pre", *RAW_TEXT})

# A start tag ends the open element on top of the stack whose end tag was left out when that
# element's name is in IMPLIED_ENDS[tag]; most blocks end an open <p>.
_ENDS_P = frozenset({
    "address", "article", "aside", "blockquote", "details", "dialog", "div", "dl", "fieldset",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hgroup", "hr", "main", "menu", "nav", "ol", "p", "pre", "section", "table", "ul", "li",
    "dt", "dd",
})  # fmt: skip
_TABLE_PARTS = frozenset({"thead", "tbody", "tfoot", "tr", "td", "th", "caption", "colgroup"})
IMPLIED_ENDS: dict[str, frozenset[str]] = {
    "li": frozenset({"li"}),
    "dt": frozenset({"dt", "dd"}),
    "dd": frozenset({"dt", "dd"}),
    "tr": frozenset({"tr", "td", "th", "caption", "colgroup"}),
    "td": frozenset({"td", "th"}),
    "th": frozenset({"td", "th"}),
    "thead": _TABLE_PARTS,
    "tbody": _TABLE_PARTS,
    "tfoot": _TABLE_PARTS,
    "option": frozenset({"option"}),
    "optgroup": frozenset({"option", "optgroup"}),
    "rt": frozenset({"rt", "rp"}),
    "rp": frozenset({"rt", "rp"}),
    "body": frozenset({"head"}),
}

PieceKind = Literal["text", "open", "close", "kept", "break", "boundary"]
# What an element's tags are to units: inline markup, kept inline markup, a kept subtree, or
# a boundary.
ElementRole = Literal["inline", "kept_inline", "kept", "block"]


def translate_html(
    document: str, translate: Translate, language: str | None = None, source: str | None = None
) -> str:
    """`document` (a whole page or a fragment) with its text translated; see the module.

    Args:
        language: the target language: written into the root `<html>`'s `lang` and
            `xml:lang` where it has them (`_` as `-`: `pt_BR` -> `pt-BR`), and into those of
            passages in the source language; None: left alone.
        source: the source language: a passage whose `lang` names another is kept as written
            (`html_languages`); None: every passage is translated.

    Raises:
        DocumentError: the document does not parse (see the module), or holds a control
            character, naming line and column.
    """
    events = tokenize(document)
    structure = _Structure(document, source)
    pieces = structure.pieces(events)
    table = {"&": "&amp;", "<": "&lt;", **_spellings(document, events)}

    def escape(word: str) -> str:
        return "".join(table.get(char, char) for char in word)

    def write(unit: Unit, translation: AlignedText) -> str:
        return render(unit, translation, escape)

    relabelled = structure.relabelled
    languages = target_languages(document, events, language, relabelled) if language else []
    return translate_regions(document, _regions(document, pieces), translate, write, languages)


def regions(document: str) -> list[Region]:
    """The units of `document` with the characters each replaces, in order.

    Raises:
        DocumentError: the document does not parse.
    """
    return _regions(document, _Structure(document).pieces(tokenize(document)))


@dataclass(frozen=True)
class Piece:
    """What a run of events is to a unit: text (decoded), an inline tag, kept markup (with the
    text the model reads for it), or a boundary between units."""

    kind: PieceKind
    start: int
    end: int
    text: str = ""


@dataclass
class _Element:
    name: str
    event: Event
    role: ElementRole


class _Structure:
    """Checks the nesting of the events and says what each is to a unit (`Piece`), in time
    linear in the events however deep they nest (thousands of `<b>` in a few kilobytes)."""

    def __init__(self, document: str, source: str | None = None):
        self.document, self.source = document, source
        self.stack: list[_Element] = []
        self.open_at: dict[str, list[int]] = {}  # name -> where it is open in the stack
        self.hidden_at: int | None = None  # where the outermost open kept element is
        # Start tags whose `lang` becomes the target: in the source language, translated.
        self.relabelled: list[Event] = []

    def pieces(self, events: list[Event]) -> list[Piece]:
        pieces: list[Piece] = []
        kept_from = None  # the start event of the kept inline element being read
        kept_text: list[str] = []
        for event in events:
            hidden = self._hidden()
            if event.kind in ("start", "empty"):
                self._end_implied(event.name)
            if event.kind == "start":
                self._push(_Element(event.name, event, self._role(event, hidden)))
            if event.kind in ("start", "empty") and hidden is None:
                self._relabel(event)
            closed = self._close(event) if event.kind == "end" else None
            if hidden == "kept_inline":
                read = kept_from is not None and kept_from.name not in INLINE_GRAPHICS
                if (
                    event.kind in ("text", "reference")
                    and read
                    and self.stack[-1].name not in RAW_TEXT
                ):
                    kept_text.append(self._text(event))  # what the model reads: not a script
                if closed is not None and closed.event is kept_from:
                    pieces.append(Piece("kept", kept_from.start, event.end, "".join(kept_text)))
                continue
            if hidden == "kept":
                continue
            if event.kind == "start" and self.stack[-1].role == "kept_inline":
                kept_from, kept_text = event, []
                continue
            pieces.append(self._piece(event, closed))
        self._check_all_closed()
        return pieces

    def _relabel(self, event: Event) -> None:
        """Note `event`, a start tag outside kept markup, where its `lang` names the source
        language and it is translated (not kept itself)."""
        kept = event.translate_no or (
            event.kind == "start" and self.stack[-1].role in ("kept", "kept_inline")
        )
        source_language = event.lang is not None and not foreign(event, self.source)
        if self.source is not None and source_language and not kept:
            self.relabelled.append(event)

    def _hidden(self) -> str | None:
        """Whether the next event lies inside a kept element, and which kind (the outermost)."""
        return None if self.hidden_at is None else self.stack[self.hidden_at].role

    def _push(self, element: _Element) -> None:
        if self.hidden_at is None and element.role in ("kept", "kept_inline"):
            self.hidden_at = len(self.stack)
        self.open_at.setdefault(element.name, []).append(len(self.stack))
        self.stack.append(element)

    def _pop_from(self, depth: int) -> None:
        """Close the open elements from `depth` up."""
        while len(self.stack) > depth:
            self.open_at[self.stack.pop().name].pop()
        if self.hidden_at is not None and self.hidden_at >= depth:
            self.hidden_at = None

    def _role(self, event: Event, hidden: str | None) -> ElementRole:
        name = event.name
        if hidden is not None:
            return "block"  # inside kept markup: only its nesting matters
        # The root's `lang` is the page's, whose text is the source to translate from.
        kept = event.translate_no or (name != "html" and foreign(event, self.source))
        if name in KEPT or (kept and name not in _PHRASING):
            return "kept"
        if name in _KEPT_INLINE or (kept and name in INLINE):
            return "kept_inline"
        return "inline" if name in INLINE else "block"

    def _piece(self, event: Event, closed: _Element | None) -> Piece:
        kind: PieceKind = "boundary"
        if event.kind in ("text", "reference"):
            return Piece("text", event.start, event.end, self._text(event))
        if event.kind == "start" and self.stack[-1].role == "inline":
            kind = "open"
        elif closed is not None and closed.role == "inline":
            kind = "close"
        elif event.kind == "empty" and event.name == "br":
            kind = "break"
        elif event.kind == "comment" or (event.kind == "empty" and event.name in _WORDLESS):
            kind = "kept"
        return Piece(kind, event.start, event.end)

    def _text(self, event: Event) -> str:
        raw = self.document[event.start : event.end]
        return html.unescape(raw) if event.kind == "reference" else raw

    def _end_implied(self, name: str) -> None:
        """Pop the open elements a start tag `name` ends, their end tags left out."""
        ends = IMPLIED_ENDS.get(name, frozenset()) | (
            frozenset({"p"}) if name in _ENDS_P else frozenset()
        )
        while self.stack and self.stack[-1].name in ends and self.stack[-1].name in OPTIONAL_END:
            self._pop_from(len(self.stack) - 1)

    def _close(self, event: Event) -> _Element | None:
        """Pop the element an end tag closes, and those inside it whose end tags HTML lets an
        author leave out. None for a `</p>` with no paragraph open (`<p><div>..</div></p>`,
        common in pages a CMS wrote): HTML reads it as an empty paragraph, a boundary.

        Raises:
            DocumentError: nothing to close, or an element inside that needs its end tag.
        """
        if event.name == "p" and not self.open_at.get("p"):
            return None
        if not self.open_at.get(event.name):
            raise DocumentError(
                event.line,
                event.column,
                f"</{event.name}> closes nothing: no <{event.name}> is open",
            )
        depth = self.open_at[event.name][-1]
        for inner in self.stack[depth + 1 :]:
            if inner.name not in OPTIONAL_END:
                raise DocumentError(
                    event.line,
                    event.column,
                    f"</{event.name}> closes <{inner.name}> of line {inner.event.line}, column "
                    f"{inner.event.column}, which needs its own end tag first",
                )
        closed = self.stack[depth]
        self._pop_from(depth)
        return closed

    def _check_all_closed(self) -> None:
        for element in self.stack:
            if element.name not in OPTIONAL_END:
                event = element.event
                raise DocumentError(event.line, event.column, f"<{element.name}> is never closed")


def _regions(document: str, pieces: list[Piece]) -> list[Region]:
    """The units of `pieces`: runs between boundaries, cut again at inline tags whose partner
    lies in another run (`<b>` around a block), each with the characters it replaces."""
    regions: list[Region] = []
    run: list[Piece] = []
    for piece in [*pieces, Piece("boundary", len(document), len(document))]:
        if piece.kind != "boundary":
            run.append(piece)
            continue
        for part in _split_unmatched(run):
            regions += _region(document, part)
        run = []
    return regions


def _split_unmatched(run: list[Piece]) -> list[list[Piece]]:
    """`run` cut at its opening tags never closed in it and closing tags never opened in it:
    those stay where they are, outside every unit."""
    open_at: list[int] = []
    unmatched: set[int] = set()
    for i, piece in enumerate(run):
        if piece.kind == "open":
            open_at.append(i)
        elif piece.kind == "close":
            if open_at:
                open_at.pop()
            else:
                unmatched.add(i)
    unmatched.update(open_at)
    parts, part = [], []
    for i, piece in enumerate(run):
        if i in unmatched:
            parts.append(part)
            part = []
        else:
            part.append(piece)
    return [*parts, part]


def _without_text_kept(run: list[Piece]) -> list[Piece]:
    """`run` with each outermost inline element that holds no text and no line break (an icon,
    `<i class="fa fa-check"></i>`; a linked image, `<a href=x><img></a>`) made one piece of
    kept markup: markup without text, which keeps the whitespace around it (as a span it lost
    it: `<i></i> Erledigt` came back `<i></i>Erledigt`, the icon touching the word)."""
    opened: list[int] = []  # the pieces that open the elements open here
    worded: list[bool] = []  # whether each of them holds text (or a line break) so far
    textless: dict[int, int] = {}  # the piece that opens an element without text: its close
    for i, piece in enumerate(run):
        if piece.kind == "open":
            opened.append(i)
            worded.append(False)
        elif piece.kind == "close":
            start, held = opened.pop(), worded.pop()
            if not held:
                textless[start] = i
            elif worded:  # what a child holds, its parent holds
                worded[-1] = True
        elif piece.kind in ("text", "break") and worded:
            worded[-1] = True
    merged, i = [], 0
    while i < len(run):
        close = textless.get(i)
        merged.append(run[i] if close is None else Piece("kept", run[i].start, run[close].end))
        i = i + 1 if close is None else close + 1
    return merged


def _region(document: str, run: list[Piece]) -> list[Region]:
    if not run:
        return []
    run = _without_text_kept(run)
    builder = UnitBuilder()
    worded = [i for i, piece in enumerate(run) if piece.kind == "text" and piece.text.strip()]
    for i, piece in enumerate(run):
        raw = document[piece.start : piece.end]
        if piece.kind == "text":
            builder.text(piece.text)
        elif piece.kind == "open":
            builder.open(raw, may_be_empty=True)
        elif piece.kind == "close":
            builder.close(raw)
        else:
            before = _beside(document, run, i, -1) if worded and worded[0] < i else ""
            after = _beside(document, run, i, 1) if worded and i < worded[-1] else ""
            builder.kept(raw, piece.text, attachment(before, after), piece.kind == "break")
    start, end = run[0].start, run[-1].end
    while start < end and document[start].isspace():
        start += 1
    while end > start and document[end - 1].isspace():
        end -= 1
    return [Region(start, end, builder.build())]


def _beside(document: str, run: list[Piece], i: int, step: int) -> str:
    """The character beside piece i of `run` on the side `step` points to, looking through the
    tags of inline elements: in `<b>Wort</b><img>` the image touches `Wort`, in
    `<b>Wort</b> <img>` it stands apart."""
    j = i + step
    while 0 <= j < len(run) and run[j].kind in ("open", "close"):
        j += step
    if 0 <= j < len(run) and run[j].kind == "text":
        edge = run[j].start if step > 0 else run[j].end - 1
        return document[edge]
    return document[run[i].start - 1] if step < 0 else document[run[i].end : run[i].end + 1]


def _spellings(document: str, events: list[Event]) -> dict[str, str]:
    """Character -> the reference it was first written as (`&copy;`, `&#8212;`); only complete
    references (with `;`) that stand for one character."""
    found: dict[str, str] = {}
    for event in events:
        raw = document[event.start : event.end]
        if event.kind == "reference" and raw.endswith(";"):
            char = html.unescape(raw)
            if len(char) == 1:
                found.setdefault(char, raw)
    return found
