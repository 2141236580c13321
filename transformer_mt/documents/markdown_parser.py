"""The markdown-it parser as Markdown documents need it (markdown.py): CommonMark with GitHub's
tables and strikethrough, whose inline rules record the characters each token was read from
(`_recording`), which reads a footnote label whole (`_footnote_label`) and no footnote
definition as a link's (`_not_a_footnote`), takes every link destination (`_any_link`), and
refuses in one line what it would nest too deeply to read (`_refusing_depth`).

markdown-it-py is optional (the `documents` extra): without it `parser` raises MarkdownMissing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from transformer_mt.documents.units import DocumentError
from transformer_mt.errors import TmtError

INSTALL = "pip install 'transformer_mt[documents]'"
# How deep block quotes and lists may nest, in markdown-it's levels (a block quote 1, a list
# and its item 2): its default preset's (its commonmark preset has 20). Its parser recurses
# about 2 frames a level (3 per nested `[` inside a paragraph), far below Python's 1,000.
MAX_NESTING = 100
# GitHub's footnote label (`[^1]`), which CommonMark reads as text (markdown.py keeps it).
FOOTNOTE_LABEL = r"\[\^[^\]\s\\]+\]"
_REFERENCE = re.compile(FOOTNOTE_LABEL)


class MarkdownMissing(TmtError):
    """markdown-it-py is not installed (the `documents` extra)."""

    def __init__(self) -> None:
        super().__init__(f"Markdown documents need markdown-it-py: {INSTALL}")


def parser() -> Any:
    """A CommonMark parser with tables and strikethrough whose inline rules record where their
    tokens come from (`_recording`).

    Raises:
        MarkdownMissing: markdown-it-py is not installed.
    """
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        raise MarkdownMissing() from None
    md = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING}).enable(["table", "strikethrough"])
    # Escapes and character references stay tokens of their own (markdown.py's `_joined`
    # joins the rest).
    md.disable("text_join")
    # markdown-it refuses destinations it would not render safely (`javascript:`, `file:`),
    # reading the link as text; the splice copies them as written, so every one is a link.
    md.validateLink = _any_link
    md.block.tokenize = _refusing_depth(md.block.tokenize)
    blocks = md.block.ruler
    for name, rule in zip(blocks.get_active_rules(), blocks.getRules(""), strict=True):
        if name == "reference":
            blocks.at(name, _not_a_footnote(rule))
    ruler = md.inline.ruler
    ruler.before("link", "footnote_label", _footnote_label)
    for name, rule in zip(ruler.get_active_rules(), ruler.getRules(""), strict=True):
        ruler.at(name, _recording(name, rule))
    return md


def _any_link(url: str) -> bool:
    return True


def _not_a_footnote(reference: Callable) -> Callable:
    """markdown-it's rule for link reference definitions (`[label]: destination`), but for a
    footnote definition (`[^1]: text`): CommonMark reads `[^1]: Wikipedia` as a link's
    definition, and every `[^1]` in the text as a link to it, its label read as link text."""

    def rule(state: Any, start: int, end: int, silent: bool) -> bool:
        begin = state.bMarks[start] + state.tShift[start]
        return not state.src.startswith("[^", begin) and reference(state, start, end, silent)

    return rule


def _footnote_label(state: Any, silent: bool) -> bool:
    """Inline rule: a footnote label (`[^1]`) read whole as text, so that emphasis or code
    span delimiters inside it (`[^a*b*c]`) do not cut it (markdown.py's `_text_with_footnotes`
    keeps it). One followed by `(` or `[` is left to the link rule: `[^1](url)` is a link.
    Silent, it reads nothing: markdown-it's search for the end of a link's text
    (`parseLinkLabel`) runs the rules silent, and refuses the link where a `[` is read as more
    than one character (a nested link), so `[eine Katze[^2]](url)` was no link and its URL went
    to the model."""
    if silent:
        return False
    found = _REFERENCE.match(state.src, state.pos, state.posMax)
    if found is None or state.src[found.end() : found.end() + 1] in ("(", "["):
        return False
    state.push("text", "", 0).content = found.group()
    state.pos = found.end()
    return True


def _refusing_depth(tokenize: Callable) -> Callable:
    """markdown-it's block `tokenize`, refusing lines it would skip: past MAX_NESTING levels
    it leaves the rest of a container unread (and so untranslated), where its recursion stops.

    Raises:
        DocumentError: the first line nested too deeply.
    """

    def refusing(state: Any, start_line: int, end_line: int) -> None:
        line = state.skipEmptyLines(start_line)
        deeper = line < end_line and state.sCount[line] >= state.blkIndent
        if deeper and state.level >= MAX_NESTING:
            raise DocumentError(
                line + 1,
                1,
                f"block quotes and lists nested {MAX_NESTING} levels deep (a list and its "
                "item count 2): markdown-it reads no deeper",
            )
        tokenize(state, start_line, end_line)

    return refusing


def _recording(name: str, rule: Callable) -> Callable:
    """Inline `rule` that also writes on each token it makes the content characters it read,
    `meta["source"] = (start, end)`; a link's tokens also where its text ends,
    `meta["label_end"]` (at its `]`), and that text as written, `meta["label"]` (the label of
    a shortcut or collapsed reference). Tokens made by a rule inside keep that rule's."""

    def recorded(state: Any, silent: bool) -> bool:
        start, count = state.pos, len(state.tokens)
        if not rule(state, silent):
            return False
        if not silent:
            link: dict[str, Any] = {}
            if name == "link":  # markdown-it's own search for the `]`, as its link rule does
                label_end = state.md.helpers.parseLinkLabel(state, start, True)
                link = {"label_end": label_end, "label": state.src[start + 1 : label_end]}
            for token in state.tokens[count:]:
                token.meta.setdefault("source", (start, state.pos))
                for key, value in link.items():
                    token.meta.setdefault(key, value)
        return True

    return recorded
