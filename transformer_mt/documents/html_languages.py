"""The languages an HTML document names (`lang`), and what translation does with them.

The root `<html>`'s `lang` and `xml:lang` become the target language: the page is in it now
(whatever it named: the page is read as being in the source language).
Another element's `lang` names the language of its passage (a quotation, a name, a line of
Arabic in a German page). A passage in the source language is translated like the text
around it, and its `lang` becomes the target language too; one in another language is kept as
written, as if it had `translate="no"`: the model translates from its source language, and
would write a guess for text in another one, under a `lang` (and `dir`) that no longer fits.
Codes are compared by language (`de`, `de-AT`, `deu` and `deu_Latn` are one), their region
and script aside.
"""

from __future__ import annotations

import html
import re

from transformer_mt.documents.html_events import Event
from transformer_mt.documents.units import Replacement
from transformer_mt.inference.sentences import splitter_language
from transformer_mt.langid import names_one_language, primary_code

# The name of a start tag, and each attribute after it, read as `html.parser` reads them.
_TAG_NAME = re.compile(r"<[a-zA-Z][^\t\n\r\f />\x00]*")
_ATTRIBUTE = re.compile(
    r"""(?:\s|/(?!>))*([^\s/>][^\s/=>]*)(?:\s*=+\s*('[^']*'|"[^"]*"|(?!['"])[^>\s]*))?"""
)
LANGUAGE_ATTRIBUTES = frozenset({"lang", "xml:lang"})


def language(code: str) -> str:
    """The language of a code, region and script aside (`de-AT`, `deu_Latn` -> `de`)."""
    return splitter_language(primary_code(code))


def foreign(event: Event, source: str | None) -> bool:
    """Whether `event`, a start tag, marks a passage in a language other than `source` (None,
    or a code of no one language such as an imported model's `mul` or `ROMANCE`: unknown,
    so none is)."""
    if source is None or event.lang is None or not names_one_language(source):
        return False
    return language(event.lang) != language(source)


def target_languages(
    document: str, events: list[Event], target: str, relabelled: list[Event]
) -> list[Replacement]:
    """The values of `lang` and `xml:lang` to become `target`: the root `<html>`'s (the
    document's first start tag) and those of the `relabelled` start tags (passages in the
    source language, translated: `html._Structure`)."""
    value = html.escape(target.replace("_", "-"), quote=True)
    root = next((e for e in events if e.kind in ("start", "empty")), None)
    tags = [root] if root is not None and root.name == "html" else []
    tags += [event for event in relabelled if event not in tags]
    return [found for event in tags for found in _values(document, event, value)]


def _values(document: str, event: Event, value: str) -> list[Replacement]:
    """`value` in place of each `lang` and `xml:lang` value of the start tag `event`."""
    tag = document[event.start : event.end]
    found, position = [], _TAG_NAME.match(tag).end()
    while (attribute := _ATTRIBUTE.match(tag, position)) and attribute.end() > position:
        position = attribute.end()
        if attribute.group(1).lower() not in LANGUAGE_ATTRIBUTES or attribute.group(2) is None:
            continue
        start, end = attribute.span(2)
        if attribute.group(2)[:1] in ("'", '"'):
            start, end = start + 1, end - 1  # inside the quotes
        found.append(Replacement(event.start + start, event.start + end, value))
    return found
