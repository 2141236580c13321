"""The languages an HTML document names (`lang`), and what translation does with them.

The root `<html>`'s `lang` and `xml:lang` become the target language: the page is in it now
(whatever it named: the page is read as being in the source language).
Another element's `lang` names the language of its passage (a quotation, a name, a line of
Arabic in a German page). A passage in the source language is translated like the text
around it, and its `lang` becomes the target language too; one in another language is kept as
written, as if it had `translate="no"`: the model translates from its source language, and
would write a guess for text in another one, under a `lang` (and `dir`) that no longer fits.
Codes are compared by language (`de`, `de-AT`, `deu` and `deu_Latn` are one), their region
and script aside. Where those tags say which way their text runs (`dir="rtl"` or `"ltr"`), it
becomes the target language's way: an Arabic page translated into English had stayed laid out
right to left (`dir="auto"`, which lets the browser look, stays).
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
# Languages written right to left (ISO 639-1 and -3 codes, as `langid.primary_code` gives
# them: NLLB's `arb` and `pes` are `ara` and `fas` there), and the scripts that are, for a
# code that names its script (`az-Arab`, `pa_Arab`).
RIGHT_TO_LEFT = frozenset(
    {"ar", "ara", "he", "heb", "iw", "fa", "fas", "prs", "ur", "urd", "yi", "yid"}
    | {"ps", "pus", "pbt", "sd", "snd", "ug", "uig", "dv", "div", "ckb", "syr", "arz", "ary"}
)
RIGHT_TO_LEFT_SCRIPTS = frozenset({"arab", "hebr", "thaa", "syrc", "nkoo", "adlm", "rohg"})


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
    values = {**dict.fromkeys(LANGUAGE_ATTRIBUTES, value), "dir": direction(target)}
    root = next((e for e in events if e.kind in ("start", "empty")), None)
    tags = [root] if root is not None and root.name == "html" else []
    tags += [event for event in relabelled if event not in tags]
    return [found for event in tags for found in _values(document, event, values)]


def direction(code: str) -> str:
    """Which way text in the language of `code` runs: "rtl" or "ltr" (by its script where
    the code names one)."""
    parts = code.strip().replace("-", "_").lower().split("_")
    scripts = [part for part in parts[1:] if len(part) == 4 and part.isalpha()]
    if scripts:
        return "rtl" if scripts[0] in RIGHT_TO_LEFT_SCRIPTS else "ltr"
    return "rtl" if primary_code(code) in RIGHT_TO_LEFT else "ltr"


def _values(document: str, event: Event, values: dict[str, str]) -> list[Replacement]:
    """`values` (by attribute name) in place of the values of the start tag `event`'s
    attributes; `dir` only where it is "ltr" or "rtl"."""
    tag = document[event.start : event.end]
    found, position = [], _TAG_NAME.match(tag).end()
    while (attribute := _ATTRIBUTE.match(tag, position)) and attribute.end() > position:
        position = attribute.end()
        name, given = attribute.group(1).lower(), attribute.group(2)
        if name not in values or given is None:
            continue
        start, end = attribute.span(2)
        if given[:1] in ("'", '"'):
            start, end, given = start + 1, end - 1, given[1:-1]  # inside the quotes
        if name == "dir" and given.strip().lower() not in ("ltr", "rtl"):
            continue
        found.append(Replacement(event.start + start, event.start + end, values[name]))
    return found
