"""Documents sent to the server (`format: "html"` or `"markdown"` in /v1/translate, `"html"` in
LibreTranslate's /translate): each text a document whose text is translated and whose markup
is kept, by documents/html.py or documents/markdown.py (what is translated and kept, and how
inline markup finds its words: docs/documents.md).

`documents.translate_document` translates with a `Translator`; the server translates through
its engine, so that documents share its batches, caches and queue with every other request.
A document is translated in three steps, so that no thread waits while the engine decodes
(jobs.py): `units` parses the documents for the text of their units (the text between block
boundaries), `unit_requests` cuts those into engine requests of at most the engine's texts
per request, which jobs.py submits and waits for on the event loop (cancelled when the client
leaves), and `translate_documents` writes each document with its units' translations, aligned
by `Engine.align` (the forced pass `translate_document` makes).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from transformer_mt.documents import html, markdown
from transformer_mt.documents.units import (
    AlignedText,
    DocumentError,
    Region,
    Translate,
    UnitTexts,
)
from transformer_mt.inference.languages import Pair
from transformer_mt.inference.requests import Texts
from transformer_mt.serve.contract import Engine
from transformer_mt.text_files import BOM

if TYPE_CHECKING:  # torch would come with it; a Translation is only read here
    from transformer_mt.inference.translator import Translation

# Each format of documents.FORMATS: how to find a document's units.
_REGIONS: dict[str, Callable[[str], list[Region]]] = {
    "html": html.regions,
    "markdown": markdown.regions,
}


def without_bom(documents: Texts) -> Texts:
    """`documents` as `tmt translate` reads a file: a leading byte order mark is no part of
    the document (parsed, it would be text before the doctype, or unmake a heading)."""
    return documents.of_texts([text.removeprefix(BOM) for text in documents.texts])


def units(documents: Sequence[str], text_format: str) -> list[UnitTexts]:
    """The text of each translatable unit of each of `documents` (in `text_format`, one of
    documents.FORMATS), in order, with the characters each keeps as written (code, where a
    glossary finds no term): what is translated, and, joined by newlines, what
    `source: "auto"` identifies the language of. Parses: call it off the event loop.

    Raises:
        DocumentError: a document that does not parse (or holds a control character, or a
            Markdown one nests too deeply), naming line and column.
        MarkdownMissing: Markdown without markdown-it-py installed.
    """
    parse = _REGIONS[text_format]
    found = []
    for index, document in enumerate(documents):
        try:
            regions = parse(document)
        except DocumentError as err:
            err.document = index  # of a list, which one (the APIs name it)
            raise
        found.append(UnitTexts([region.unit for region in regions if region.unit.translatable]))
    return found


def unit_requests(documents: Texts, found: list[UnitTexts], most: int) -> list[Texts]:
    """The requests the engine is asked for `found`, the units of each of `documents`
    (`units`): each document's units in order, at most `most` per request, asked with the
    document's options (`Texts.picked`): its direction and its glossary, and each unit's
    kept characters."""
    asked = []
    for index, texts in enumerate(found):
        kept = texts.kept_spans()
        for start in range(0, len(texts), most):
            chunk = texts[start : start + most]
            request = documents.picked([index] * len(chunk)).of_texts(chunk)
            asked.append(dataclasses.replace(request, kept=kept[start : start + most]))
    return asked


def translate_documents(
    engine: Engine, documents: Texts, text_format: str, translations: list[Translation]
) -> list[str]:
    """Each of `documents`, in `text_format`, written with `translations` (one per unit of
    `units`, in order) in place of its units' text, markup kept. Blocks (it runs the model to
    align each unit with its translation): call it off the event loop.

    An HTML page's root `lang` becomes its direction's target; a passage whose `lang` names
    another language than its source is kept as written.
    """
    remaining = iter(translations)
    translated = []
    for i, document in enumerate(documents.texts):
        direction = documents.direction(i) or (None, None)
        translate = _aligned(engine, direction, remaining)
        if text_format == "html":
            source = direction[0] or engine.languages.default[0]
            target = direction[1] or engine.languages.default[1]
            translated.append(html.translate_html(document, translate, target, source))
        else:
            translated.append(markdown.translate_markdown(document, translate))
    return translated


def _aligned(engine: Engine, direction: Pair, remaining: Iterator[Translation]) -> Translate:
    """Documents' `units.Translate` for one document: its units' translations, the next of
    `remaining`, each aligned with its unit by the engine."""

    def translate(texts: Sequence[str]) -> list[AlignedText]:
        found = list(itertools.islice(remaining, len(texts)))
        return [
            engine.align(text, translation, direction)
            for text, translation in zip(texts, found, strict=True)
        ]

    return translate
