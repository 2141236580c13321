"""Documents sent to the server (`format: "html"` or `"markdown"` in /v1/translate, `"html"` in
LibreTranslate's /translate): each text a document whose text is translated and whose markup
is kept, by documents/html.py or documents/markdown.py (what is translated and kept, and how
inline markup finds its words: docs/documents.md).

`documents.translate_document` translates with a `Translator`; the server translates through
its engine, so that documents share its batches, caches and queue with every other request.
So this module hands documents/ the engine as its `units.Translate`: a document's units
(the text between block boundaries) go to the engine as jobs of at most the engine's texts per
request, and each translation is aligned to its unit by `Engine.align` (the forced pass
`translate_document` makes). It runs in a worker thread, waiting for the jobs: a client that
leaves does not cancel them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from transformer_mt.config import DecodeConfig
from transformer_mt.documents import html, markdown
from transformer_mt.documents.units import AlignedText, Region, Translate
from transformer_mt.inference.requests import Texts
from transformer_mt.serve.contract import Engine

# Each format of documents.FORMATS: how to find a document's units.
_REGIONS: dict[str, Callable[[str], list[Region]]] = {
    "html": html.regions,
    "markdown": markdown.regions,
}


def translate_documents(
    engine: Engine, documents: Texts, text_format: str, decode: DecodeConfig
) -> list[str]:
    """Each of `documents`, in `text_format` (one of documents.FORMATS), translated in its
    direction and with its glossary, markup kept: each unit of a document is asked with the
    document's options (`Texts.picked`). Blocks: call it off the event loop.

    An HTML page's root `lang` becomes its direction's target.

    Raises:
        DocumentError: a document that does not parse (or holds a control character, or a
            Markdown one nests too deeply), naming line and column.
        MarkdownMissing: Markdown without markdown-it-py installed.
        TmtError: a refusal of the engine's (a full queue, a direction, a setting).
    """
    translated = []
    for i, document in enumerate(documents.texts):
        direction = documents.direction(i) or (None, None)
        translate = _units(engine, decode, documents, i)
        if text_format == "html":
            target = direction[1] or engine.languages.default[1]
            translated.append(html.translate_html(document, translate, target))
        else:
            translated.append(markdown.translate_markdown(document, translate))
    return translated


def plain_text(document: str, text_format: str) -> str:
    """The text of `document` (in `text_format`) that would be translated, its units joined
    by newlines: what `source: "auto"` identifies the language of.

    Raises:
        DocumentError: the document does not parse.
        MarkdownMissing: Markdown without markdown-it-py installed.
    """
    units = [region.unit for region in _REGIONS[text_format](document)]
    return "\n".join(unit.text for unit in units if unit.translatable)


def _units(engine: Engine, decode: DecodeConfig, documents: Texts, index: int) -> Translate:
    """The engine as documents' `units.Translate` for document `index` of `documents`: its
    units asked with its options."""
    direction = documents.direction(index) or (None, None)

    def translate(texts: Sequence[str]) -> list[AlignedText]:
        most = engine.limits.max_request_sentences
        jobs = []
        try:
            for start in range(0, len(texts), most):
                chunk = list(texts[start : start + most])
                units = documents.picked([index] * len(chunk)).of_texts(chunk)
                jobs.append(engine.submit(units, decode))
            translations = [t for job in jobs for t in job.future.result()]
        except BaseException:
            for job in jobs:  # the others' work is of no use any more
                job.cancel()
            raise
        return [
            engine.align(text, translation.texts[0], direction)
            for text, translation in zip(texts, translations, strict=True)
        ]

    return translate
