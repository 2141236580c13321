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
from transformer_mt.inference.languages import Pair
from transformer_mt.serve.contract import Engine

# Each format of documents.FORMATS: (translate a document, find its units).
_FORMATS: dict[str, tuple[Callable[[str, Translate], str], Callable[[str], list[Region]]]] = {
    "html": (html.translate_html, html.regions),
    "markdown": (markdown.translate_markdown, markdown.regions),
}


def translate_documents(
    engine: Engine,
    documents: Sequence[str],
    text_format: str,
    decode: DecodeConfig,
    directions: Sequence[Pair],
) -> list[str]:
    """Each of `documents`, in `text_format` (one of documents.FORMATS), translated in its
    direction, markup kept. Blocks: call it off the event loop.

    Raises:
        DocumentError: a document that does not parse, naming line and column.
        MarkdownMissing: Markdown without markdown-it-py installed.
        TmtError: a refusal of the engine's (a full queue, a direction, a setting).
    """
    translate = _FORMATS[text_format][0]
    return [
        translate(document, _units(engine, decode, direction))
        for document, direction in zip(documents, directions, strict=True)
    ]


def plain_text(document: str, text_format: str) -> str:
    """The text of `document` (in `text_format`) that would be translated, its units joined
    by newlines: what `source: "auto"` identifies the language of.

    Raises:
        DocumentError: the document does not parse.
        MarkdownMissing: Markdown without markdown-it-py installed.
    """
    units = [region.unit for region in _FORMATS[text_format][1](document)]
    return "\n".join(unit.text for unit in units if unit.translatable)


def _units(engine: Engine, decode: DecodeConfig, direction: Pair) -> Translate:
    """The engine as documents' `units.Translate` for one direction."""

    def translate(texts: Sequence[str]) -> list[AlignedText]:
        most = engine.limits.max_request_sentences
        jobs = []
        try:
            for start in range(0, len(texts), most):
                chunk = list(texts[start : start + most])
                jobs.append(engine.submit(chunk, decode, directions=[direction] * len(chunk)))
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
