"""HTML as a flat list of events, each with the characters of the document it is: what
html.py builds units from and writes back into.

Python's `html.parser` tokenizes (html.py says why), told what its own releases read
differently: the elements whose content is text up to their end tag (`RAW_TEXT`), and the
empty comments HTML closes early (`<!-->`). Character references are events of their own, so
that a translated character is written as the input spelled it. Markup that never ends, and a
reference to a control character (which the standard library drops), are refused naming the
line and column.
"""

from __future__ import annotations

import bisect
import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Literal

from transformer_mt.documents.units import DocumentError, check_characters, not_text

# Elements without content or end tag.
VOID = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
    "source", "track", "wbr", "basefont", "bgsound", "frame", "keygen",
})  # fmt: skip
# Elements whose content is text up to their end tag, not markup (HTML's raw text elements,
# and the textarea, whose escapable raw text is kept as written here): a script may start with
# `<!--`, a textarea hold `<b>`. Set on the parser, so that no Python release reads them other
# ways (Python 3.11's html.parser reads only script and style so).
RAW_TEXT = ("script", "style", "textarea", "xmp", "iframe", "noembed", "noframes")
# The title's escapable raw text: no markup (`<title>A <b> B</title>` is the text "A <b> B"),
# but character references; read as text up to its end tag, its references split off here.
RCDATA = ("title",)
# A character reference as html.parser reads one in text (the `;` may be left out).
_REFERENCE = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[a-zA-Z][-.a-zA-Z0-9]*);?")
EventKind = Literal["start", "end", "empty", "text", "reference", "comment", "other"]


@dataclass(frozen=True)
class Event:
    """One token of `html.parser`, with the characters [start, end) of the document it is."""

    kind: EventKind
    name: str  # the tag name, lower case; "" for text, references, comments
    start: int
    end: int
    line: int
    column: int  # from 1
    translate_no: bool = False  # a start tag with translate="no"
    lang: str | None = None  # a start tag's `lang`, as written (stripped)


class _Tokenizer(HTMLParser):
    CDATA_CONTENT_ELEMENTS = (*RAW_TEXT, *RCDATA)

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)  # references as events of their own
        self.found: list[tuple[EventKind, str, bool, str | None, int, int]] = []

    def _add(
        self, kind: EventKind, name: str = "", translate_no: bool = False, lang: str | None = None
    ) -> None:
        line, column = self.getpos()
        self.found.append((kind, name, translate_no, lang, line, column))

    def handle_starttag(self, tag, attrs):
        no = any(k == "translate" and (v or "").strip().lower() == "no" for k, v in attrs)
        lang = next(((v or "").strip() for k, v in attrs if k == "lang"), None)
        self._add("empty" if tag in VOID else "start", tag, no, lang or None)

    def handle_startendtag(self, tag, attrs):
        self._add("empty", tag)

    def handle_endtag(self, tag):
        # The end tag of a void element closes nothing: `</br>` is a line break to HTML (a
        # parse error browsers read as `<br>`), and browsers pass over `</img>` and the others,
        # kept as written: right after its start tag as part of that element (no event, so the
        # element spans both), else as markup without text.
        if tag in VOID and tag != "br" and self.found and self.found[-1][:2] == ("empty", tag):
            return
        self._add("empty" if tag in VOID else "end", tag)

    def handle_data(self, data):
        self._add("text")

    def handle_entityref(self, name):
        self._add("reference")

    def handle_charref(self, name):
        self._add("reference")

    def handle_comment(self, data):
        self._add("comment")

    def parse_comment(self, i: int, report: int = 1) -> int:
        """`<!-->` and `<!--->` end where they start, as HTML reads them (empty comments closed
        early); html.parser would read on to the next `-->` and take the text between for a
        comment, or refuse the second as never ending."""
        for empty in ("<!-->", "<!--->"):
            if self.rawdata.startswith(empty, i):
                if report:
                    self.handle_comment("")
                return i + len(empty)
        return super().parse_comment(i, report)

    def handle_decl(self, decl):
        self._add("other")

    def handle_pi(self, data):
        self._add("other")

    def unknown_decl(self, data):
        self._add("other")


def tokenize(document: str) -> list[Event]:
    """`document` as `html.parser`'s events, with where each starts and ends.

    Raises:
        DocumentError: a `<` that starts markup never ended (`html.parser` passes it on as
            text), or markup left unread at the end (an unclosed `<script>`); a control
            character (`check_characters`).
    """
    check_characters(document)
    parser = _Tokenizer()
    parser.feed(document)
    parser.close()
    line_starts = [0]
    for number, line in enumerate(document.split("\n")[:-1]):
        line_starts.append(line_starts[number] + len(line) + 1)
    starts = [line_starts[line - 1] + column for *_, line, column in parser.found]
    ends = [*starts[1:], len(document) - len(parser.rawdata)][: len(starts)]
    events: list[Event] = []
    found = zip(parser.found, starts, ends, strict=True)
    for (kind, name, no, lang, line, column), start, end in found:
        opened = events[-1].name if events and events[-1].kind == "start" else ""
        # A raw text element's own text (a script's `<!--` is JavaScript's) is no markup.
        if (
            kind == "text"
            and opened not in (*RAW_TEXT, *RCDATA)
            and _starts_markup(document, start)
        ):
            raise DocumentError(line, column + 1, f"markup {_quote(document, start)} never ends")
        if kind == "text" and opened in RCDATA:
            events += _with_references(document, start, end, line_starts)
        else:
            events.append(Event(kind, name, start, end, line, column + 1, no, lang))
    for event in events:
        raw = document[event.start : event.end]
        # `&#1;`, `&#xFFFE;`: HTML's noncharacters and controls, which unescape drops; and the
        # five C1 controls (`&#x8D;`) it has no Windows-1252 character for and returns as are.
        if event.kind == "reference" and raw.startswith("&#") and _not_text(html.unescape(raw)):
            reason = f"{raw} refers to a control character or a noncharacter, not text: remove it"
            raise DocumentError(event.line, event.column, reason)
    return events


def _not_text(char: str) -> bool:
    return not char or not_text(char)


def _with_references(document: str, start: int, end: int, line_starts: list[int]) -> list[Event]:
    """The text [start, end) of an RCDATA element as text and reference events, as html.parser
    gives them outside such elements."""
    events, position = [], start
    found = [(m.start(), m.end()) for m in _REFERENCE.finditer(document, start, end)]
    for begin, stop in [*found, (end, end)]:
        for kind, a, b in (("text", position, begin), ("reference", begin, stop)):
            if a < b:
                line = bisect.bisect_right(line_starts, a)
                events.append(Event(kind, "", a, b, line, a - line_starts[line - 1] + 1))
        position = stop
    return events


def _starts_markup(document: str, start: int) -> bool:
    """Whether the text at `start` begins like markup (`<b`, `</`, `<!`, `<?`)."""
    after = document[start + 1 : start + 2]
    return document[start] == "<" and (after.isalpha() or after in ("/", "!", "?"))


def _quote(document: str, start: int) -> str:
    return repr(document[start : start + 20].split("\n")[0])
