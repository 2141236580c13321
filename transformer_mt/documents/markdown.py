"""Markdown documents: text translated; block syntax (headings, lists, block quotes, tables, code
blocks, HTML blocks, link reference definitions) kept byte for byte, inline syntax (emphasis,
strikethrough, links, code spans) placed around the aligned target words.

Parser: markdown-it-py, CommonMark with GitHub's tables and strikethrough; kept by the
Executable Books project, used by MyST and mdformat, and the pure-Python port of markdown-it.
Its tokens say what is text and what is syntax, so no regular expression guesses at either.

Splice, not render: mdformat renders markdown-it tokens back to Markdown, but in its own style
(list markers and numbering, emphasis characters, escapes, wrapped lines, table padding), so a
translated document would differ from its source everywhere. Instead each translated unit
replaces the characters of its source text and nothing else is touched. markdown-it gives block
tokens their lines (`map`), not inline tokens their columns, so:

    1) the inline content of a block is found in its lines (markdown_lines.py)
    2) the inline rules are wrapped to record the characters each consumes (`_recording`), so
       that links (`[` and `](url "title")` or `][ref]`), code spans, images, autolinks and
       inline HTML are copied from the source exactly; emphasis and strikethrough are their
       delimiters, which markdown-it keeps as `Token.markup`

Units (units.py): the inline content of a paragraph, heading or table cell. Emphasis,
strikethrough, link text and inline HTML elements opened and closed in the unit that HTML
documents place (html.py's INLINE: `<b>`...`</b>`) are placed (placement.py) around the
aligned target words (a link's URL, title or reference kept; a shortcut or collapsed reference
link, `[Hund]` or `[Hund][]`, whose text is its label, is written with its label:
`[dog][Hund]`); code spans, autolinks and the inline HTML elements HTML documents keep
(`<kbd>Strg</kbd>`, `translate="no"`) are kept in place of their text's translation; images,
markup around no text (a linked image) and other inline HTML tags go after the word before
them, a hard line break (with the next line's `>`s and indentation) between the words around
it; a footnote definition's label is no part of its unit. A translated paragraph is written on
one line but for its hard line breaks. Translated words are written with Markdown's punctuation
escaped where it could start syntax. Front matter (`---` or `+++` fenced lines at the very
start; CommonMark has none) is kept as written, never read by the model.

The parser is set up in markdown_parser.py: markdown-it is told to take every link destination
(it refuses `javascript:` and the like, which it would not render safely, and the link would be
read as text and lose its markup: the splice copies destinations as written), and its block
parser to refuse, in one line, block quotes and lists nested MAX_NESTING deep, where it would
stop reading (its recursion is what stops there). A control character is refused
(units.check_characters).

markdown-it-py is optional: the `documents` extra.
"""

from __future__ import annotations

import re
from typing import Any

from transformer_mt.documents.html import INLINE, INLINE_GRAPHICS, INLINE_KEPT, KEPT
from transformer_mt.documents.html_events import Event, tokenize
from transformer_mt.documents.markdown_lines import (
    LINE_END,
    Lines,
    cell_offsets,
    front_matter_blanked,
    inline_offsets,
)
from transformer_mt.documents.markdown_parser import FOOTNOTE_LABEL, parser
from transformer_mt.documents.placement import is_punctuation, render
from transformer_mt.documents.units import (
    AlignedText,
    Region,
    Translate,
    Unit,
    UnitBuilder,
    attachment,
    check_characters,
    translate_regions,
)

_OPENS = {"em_open": "em_close", "strong_open": "strong_close", "s_open": "s_close"}
# Kept as written; a `whole` token is an element made one (`_grouped`).
_KEPT = {"code_inline", "image", "html_inline", "whole"}
# An inline HTML line break (`<br>`, `<BR />`, `</br>`): a line break, as in HTML documents.
_BR = re.compile(r"</?br\s*/?>", re.IGNORECASE)
# Escaped in every translated word: they could start or end inline syntax.
_SPECIAL = frozenset("\\`*_[]<|~")
# GitHub's footnotes, which CommonMark reads as text: a reference `[^1]` and, at a line's
# start, a definition's label `[^1]:`. Kept as written beside the word each touches, never
# read by the model (it dropped or translated them), and a definition on a line of its own is
# a unit of its own (`_definitions_apart`). A label is read whole (`_footnote_label`).
_FOOTNOTE = re.compile(rf"{FOOTNOTE_LABEL}(:[ \t]*)?")
# An `&` that would start a character reference (`&lt;`, `&#60;`): escaped, or it would read as
# the character it names.
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# At the start of a line: an ordered list marker (`1.`, `2)`); the others are one character.
_ORDERED = re.compile(r"^(\d{1,9})([.)])")
_LINE_START = frozenset("#>+-=")


def translate_markdown(document: str, translate: Translate) -> str:
    """`document` with its text translated; see the module.

    Raises:
        MarkdownMissing: markdown-it-py is not installed.
    """
    return translate_regions(document, regions(document), translate, _write)


def regions(document: str) -> list[Region]:
    """Every unit of `document` with the characters of the source its translation replaces.

    Raises:
        MarkdownMissing: markdown-it-py is not installed.
        DocumentError: a control character (`check_characters`), block quotes and lists
            nested MAX_NESTING deep, or a block whose text cannot be found in its lines (not
            expected).
    """
    check_characters(document)
    tokens = parser().parse(front_matter_blanked(document))
    lines = Lines(document)
    found: list[Region] = []
    row_start = 0  # where the next cell of a table row is looked for
    for i, token in enumerate(tokens):
        if token.type == "tr_open":
            row_start = lines.start(token.map[0])
        if token.type != "inline" or not token.content:
            continue
        if tokens[i - 1].type in ("th_open", "td_open"):  # an inline token is never first
            offsets = cell_offsets(document, lines, token, row_start)
            row_start = offsets[-1]
        else:
            offsets = inline_offsets(lines, token)
        for part, first, end in _definitions_apart(token.children, len(token.content)):
            run, start = _after_label(part, first)
            found.append(_region(document, run, offsets, start, end))
    return found


def _definitions_apart(children: list, length: int) -> list[tuple[list, int, int]]:
    """An inline token's children (`_joined`) as runs of their own, with the characters of its
    content [start, end) each spans: a footnote definition on a line of its own (`[^2]: ...`
    right under a paragraph or another definition) is its own unit, as a paragraph would be;
    translated with its neighbours, its text was placed by attention across theirs. One
    inside emphasis or a link (`*a` `[^1]: b*`) is not: cut there, a unit held markup never
    closed (an error)."""
    run = _joined(children)
    parts, first, start = [], 0, 0
    depth = 0  # Markdown's emphasis and links open here
    for i, child in enumerate(run):
        if child.type in _OPENS or child.type == "link_open":
            depth += 1
        elif child.type in _OPENS.values() or child.type == "link_close":
            depth -= 1
        elif child.type == "softbreak" and depth == 0 and _starts_a_definition(run, i):
            a, b = child.meta["source"]
            parts.append((run[first:i], start, a))
            first, start = i + 1, b
    parts.append((run[first:], start, length))
    return parts


def _after_label(run: list, start: int) -> tuple[list, int]:
    """A unit's children (`_joined`) from content character `start`, and where its text
    starts: after the label of the footnote definition it starts with (`[^2]: `), which is no
    part of the unit and stays at the start of its line as written. Kept in the unit, it went
    before the translation of the first source word, wherever that was aligned (`A man [^2]:
    a`): no longer a definition, and `[^2]` pointed at nothing."""
    first = run[0] if run else None
    found = _FOOTNOTE.match(first.content) if first is not None and _joinable(first) else None
    if found is None or found.group(1) is None:
        return run, start
    return [first.copy(content=first.content[found.end() :]), *run[1:]], start + found.end()


def _region(document: str, run: list, offsets: list[int], start: int, end: int) -> Region:
    def source(a: int, b: int) -> str:
        return document[offsets[a] : offsets[b]]

    run = _grouped(run)
    builder = UnitBuilder()
    autolink: list = []  # the tokens of an autolink being read
    words = ("text", "code_inline", "whole")
    worded = [i for i, c in enumerate(run) if c.type in words and c.content.strip()]
    for i, child in enumerate(run):
        kind = child.type
        if autolink or (kind == "link_open" and child.markup == "autolink"):
            autolink.append(child)
            if kind == "link_close":
                text = "".join(c.content for c in autolink)
                builder.kept(source(*child.meta["source"]), text)
                autolink = []
        elif kind == "text" and child.meta.get("escaped"):
            builder.text(child.content)
        elif kind == "text":
            _text_with_footnotes(builder, child.content)
        elif kind == "softbreak":
            builder.text(" ")
        elif kind == "hardbreak":  # `  ` or `\\` at a line end: kept, with the next line's `>`s
            a, b = child.meta["source"]
            begin = offsets[a]
            while document[begin] != "\\" and document[begin - 1] == " ":
                begin -= 1  # the spaces before the line end, which markdown-it took off the text
            builder.kept(document[begin : offsets[b]], "", "previous", line_break=True)
        elif kind in _OPENS:
            builder.open(child.markup, may_be_empty=False)
        elif kind in _OPENS.values():
            builder.close(child.markup)
        elif kind == "html_open":  # as in HTML documents, written around no word if need be
            builder.open(source(*child.meta["source"]), may_be_empty=True)
        elif kind == "html_close":
            builder.close(source(*child.meta["source"]))
        elif kind == "link_open":
            link_start = child.meta["source"][0]
            builder.open(source(link_start, link_start + 1), may_be_empty=True)
        elif kind == "link_close":
            written = source(child.meta["label_end"], child.meta["source"][1])
            builder.close(_link_end(written, child.meta["label"]))
        elif kind in _KEPT:
            a, b = child.meta["source"]
            text = child.content if kind in ("code_inline", "whole") else ""
            before = document[offsets[a] - 1 : offsets[a]] if worded and worded[0] < i else ""
            after = document[offsets[b] : offsets[b] + 1] if worded and i < worded[-1] else ""
            line_break = _is_br(child)
            builder.kept(source(a, b), text, attachment(before, after), line_break)
    first, last = offsets[start], offsets[end]
    while first < last and document[first].isspace():
        first += 1
    while last > first and document[last - 1].isspace():
        last -= 1
    return Region(first, last, builder.build())


def _grouped(run: list) -> list:
    """`run` with the inline HTML elements opened and closed in it (`_elements`) as HTML
    documents have them: the tags of one placed around its words (`<b>`, html.py's INLINE)
    as `html_open` and `html_close`; one kept as written (`<kbd>Strg</kbd>`), and an element
    around no text (a linked image, `[![Bild](a.png)](url)`; `<i class="icon"></i>`), as one
    `whole` token, its content the text the model reads for it (none: `_read_counts`), its
    `meta["source"]` its characters. Each tag as markup without text, `<kbd></kbd>` went
    beside the words and `Strg` was translated and moved; a linked image stuck to the word
    after the link, which lost its space (`](url)A dog`)."""
    elements = _elements(run)
    read_before = _read_counts(run)
    grouped: list = []
    closings: set[int] = set()  # where a placed HTML element ends
    i = 0
    while i < len(run):
        child = run[i]
        end, role = elements.get(i, (i, ""))
        if role == "placed" and read_before[end] == read_before[i + 1]:
            role = "unread"
        if role in ("kept", "unread"):
            text = "".join(_read(c) for c in run[i + 1 : end]) if role == "kept" else ""
            source = (child.meta["source"][0], run[end].meta["source"][1])
            grouped.append(child.copy(type="whole", content=text, meta={"source": source}))
            i = end + 1
            continue
        if role == "placed" and child.type == "html_inline":
            child = child.copy(type="html_open")
            closings.add(end)
        elif i in closings:
            child = child.copy(type="html_close")
        grouped.append(child)
        i += 1
    return grouped


def _elements(run: list) -> dict[int, tuple[int, str]]:
    """Each element of `run` opened and closed in it, by the index of its opening: the index
    of its closing and its role (`_html_role`; Markdown's emphasis and links are "placed").
    An HTML element is one where its tags nest with Markdown's markup and each other; of tags
    that cross (`<b>*x</b>*`, `<b><i>x</b></i>`), the inner opening left open is none, its
    tags each kept beside the word they touch."""
    found: dict[int, tuple[int, str]] = {}
    stack: list[tuple[int, str, str]] = []  # open: (index, HTML name or "" for Markdown's, role)
    for i, child in enumerate(run):
        if child.type in _OPENS or child.type == "link_open":
            stack.append((i, "", "placed"))
        elif child.type in _OPENS.values() or child.type == "link_close":
            while stack[-1][1]:  # HTML opened inside and not closed there: no element
                stack.pop()
            found[stack.pop()[0]] = (i, "placed")
        elif child.type == "html_inline":
            tag = _tag(child.content)
            role = _html_role(tag) if tag is not None and tag.kind == "start" else ""
            if role:
                stack.append((i, tag.name, role))
            elif tag is not None and tag.kind == "end":
                opened = _opened(stack, tag.name)
                if opened is not None:
                    found[stack[opened][0]] = (i, stack[opened][2])
                    del stack[opened:]
    return found


def _tag(html: str) -> Event | None:
    """An inline HTML token read as html.py reads a tag: None for a comment or declaration."""
    events = tokenize(html)
    return events[0] if len(events) == 1 and events[0].kind in ("start", "end") else None


def _html_role(tag: Event) -> str:
    """What an inline HTML element is, as in HTML documents: "kept" as written with its
    text read (`<kbd>`, `translate="no"`), "unread" (kept whole, its text never read: a
    script, a formula), "placed" around its words (`<b>`), or "" (its tags kept beside the
    words they touch)."""
    if tag.name in INLINE_KEPT or (tag.translate_no and tag.name in INLINE):
        return "kept"
    if tag.name in KEPT | INLINE_GRAPHICS or tag.translate_no:
        return "unread"
    return "placed" if tag.name in INLINE else ""


def _opened(stack: list[tuple[int, str, str]], name: str) -> int | None:
    """Where in `stack` the innermost open HTML element `name` is, above Markdown's markup."""
    for depth in range(len(stack) - 1, -1, -1):
        if stack[depth][1] in ("", name):
            return depth if stack[depth][1] else None
    return None


def _read_counts(run: list) -> list[int]:
    """How many tokens before each index of `run` (and its end) the model reads or break a
    line: an element holds none of them (it is unread) where the counts at its ends are
    equal. Counted once, as an element's inside scanned for each element took time quadratic
    in the nesting (13 s for a paragraph in 10,000 emphases)."""
    counts = [0]
    for token in run:
        counted = _read(token).strip() or token.type == "hardbreak" or _is_br(token)
        counts.append(counts[-1] + bool(counted))
    return counts


def _read(token: Any) -> str:
    """What the model reads for one token inside a kept element."""
    if token.type in ("text", "code_inline"):
        return token.content
    return " " if token.type in ("softbreak", "hardbreak") or _is_br(token) else ""


def _is_br(token: Any) -> bool:
    return token.type == "html_inline" and _BR.fullmatch(token.content) is not None


def _link_end(written: str, label: str) -> str:
    """A link's markup after its text, as `written`; but a shortcut (`[Hund]`) or collapsed
    (`[Hund][]`) reference link, whose text is its label, names its label (`[dog][Hund]`):
    its translated text would name no definition, and the link would be text. The label's
    line ends are spaces, as the paragraph is written on one line (a reference's label is
    matched with its whitespace runs as one space)."""
    if written not in ("]", "][]"):
        return written
    return "][" + label.replace("\n", " ") + "]"


def _joined(run: list) -> list:
    """`run` with each stretch of text tokens as one text token: markdown-it cuts text where
    an inline rule may start (`[`, `:`), and a footnote label must be seen whole. An escaped
    character or a character reference (`\\[`, `&#91;`) is a text token of its own, marked
    `escaped`: it stands for the character, so it is never part of a footnote label."""
    joined: list = []
    for child in run:
        previous = joined[-1] if joined else None
        if child.type == "text_special":
            joined.append(child.copy(type="text", meta={**child.meta, "escaped": True}))
        elif child.type == "text" and previous is not None and _joinable(previous):
            joined[-1] = previous.copy(content=previous.content + child.content)
        else:
            joined.append(child)
    return joined


def _joinable(token: Any) -> bool:
    return token.type == "text" and not token.meta.get("escaped")


def _text_with_footnotes(builder: UnitBuilder, text: str) -> None:
    """`text` into the unit, its footnote references and definition labels kept."""
    at = 0
    for found in _FOOTNOTE.finditer(text):
        builder.text(text[at : found.start()])
        before, after = text[found.start() - 1 : found.start()], text[found.end() :][:1]
        # a definition's `[^1]: ` not first in its unit (`_after_label`): before its text
        label = found.group(1) is not None
        builder.kept(found.group(), "", "next" if label else attachment(before, after))
        at = found.end()
    builder.text(text[at:])


def _starts_a_definition(run: list, i: int) -> bool:
    """Whether the line after softbreak i of `run` starts with a footnote definition."""
    following = run[i + 1] if i + 1 < len(run) else None
    if following is None or following.type != "text":
        return False
    found = _FOOTNOTE.match(following.content)
    return found is not None and found.group(1) is not None


def _write(unit: Unit, translation: AlignedText) -> str:
    """A translated unit, escaped where its first word would start a block at a line start;
    with hard line breaks, where any word would (the one after a break starts a line)."""
    # a hard break holds its line end, a `<br>` none
    breaks = any(kept.line_break and LINE_END.search(kept.source) for kept in unit.kept)
    return _line_start(render(unit, translation, _escape_line_start if breaks else _escape))


def _line_start(text: str) -> str:
    """`text`, escaped where it would start a block at a line start (`# `, `1.`, `>`)."""
    ordered = _ORDERED.match(text)
    if ordered:
        return f"{ordered.group(1)}\\{text[ordered.end(1) :]}"
    return "\\" + text if text[:1] in _LINE_START else text


def _escape(word: str) -> str:
    """`word` written so that it reads as the text it is: Markdown's punctuation escaped where
    it could start syntax. A footnote reference in a translation is text the model wrote (the
    document's own are kept, never read by it), so its brackets are escaped too."""
    escaped = _escape_text(word)
    if word.endswith("!") and all(map(is_punctuation, word)):
        # Punctuation moved out of an element's markup (placement rule 5) is written right
        # before its opening: a `!` there would make a link `[...](...)` an image.
        escaped = escaped[:-1] + "\\!"
    return escaped


def _escape_text(text: str) -> str:
    return "".join(
        "\\" + char if char in _SPECIAL or (char == "&" and _ENTITY.match(text, i)) else char
        for i, char in enumerate(text)
    )


def _escape_line_start(word: str) -> str:
    return _line_start(_escape(word))
