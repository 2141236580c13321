"""One call from a document to its translation, whatever its format: what `tmt translate
--format html|markdown` calls, and what the server calls for its `format` field."""

from __future__ import annotations

from transformer_mt.documents import FORMATS
from transformer_mt.documents.alignment import AlignedTranslator
from transformer_mt.documents.html import translate_html
from transformer_mt.documents.markdown import translate_markdown
from transformer_mt.errors import SettingError
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator
from transformer_mt.progress import Reports

_TRANSLATE = {"html": translate_html, "markdown": translate_markdown}


def translate_document(
    translator: Translator,
    document: str | Texts,
    format: str,
    *,
    alignment_layer: int = -1,
    progress: Reports | None = None,
) -> str:
    """`document`, a whole document in `format` (one of FORMATS), with its text translated and
    its markup kept (docs/documents.md).

    Args:
        translator: translates the units of the document, all in one `translate` call, and
            aligns their words; built without its own `alignment_layer`.
        document: the document's text, or `Texts` of that one text with its direction (for a
            model with language tags; None: the translator's own) and glossary, which every
            unit is translated with (`alignment.document_request`). The target language (or
            the translator's default one) is also written into an HTML page's root `lang`.
        alignment_layer: the decoder layer whose cross-attention aligns words, placing inline
            markup; negative counts from the last.
        progress: reports the translation and the alignment of the units
            (`progress.Reports`); None: silent.

    Raises:
        SettingError: a format not in FORMATS (naming format), a layer the model lacks
            (naming alignment_layer), a direction it has no tags for, an option a document
            cannot keep (a prefix, constraints).
        DocumentError: an HTML document that does not parse, a Markdown one nested too
            deeply, or either holding a control character, naming line and column.
        MarkdownMissing: Markdown without markdown-it-py installed.
    """
    if format not in FORMATS:
        raise SettingError("format", format, f"choose one of {', '.join(FORMATS)}")
    if not isinstance(document, str | Texts):  # bytes: decoding them is the caller's choice
        kind = type(document).__name__
        raise SettingError("document", None, f"{kind}; give the document's text (a str)")
    request = Texts.plain([document] if isinstance(document, str) else document)
    aligned = AlignedTranslator(translator, alignment_layer, request, progress)
    (text,) = request.texts
    if format != "html":
        return _TRANSLATE[format](text, aligned)
    source, target = request.direction(0) or (None, None)  # HTML names its languages
    default = translator.languages.default
    return translate_html(text, aligned, target or default[1], source or default[0])
