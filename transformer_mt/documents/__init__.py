"""Documents translated with their markup: HTML pages and fragments, Markdown files.

    translate.py   translate_document(translator, text, format): the one entry point, for
                   `tmt translate --format html|markdown` and the server's `format` field
    units.py       translation units: text with inline markup, built in source order; the
                   regions of a document they replace; DocumentError
    placement.py   render: a unit's inline markup put back around the aligned target words
    alignment.py   AlignedTranslator: a Translator's translations with word alignments from
                   its cross-attention
    html.py        HTML through the standard library's html.parser, spliced into the input
    html_events.py HTML as a flat list of positioned events (the tokenizer html.py reads)
    markdown.py    Markdown through markdown-it-py (the `documents` extra), spliced likewise
    markdown_parser.py  markdown-it set up: every link destination taken, nesting bounded
    markdown_lines.py   where each character of a block's text sits in the document

What is translated and kept, and why these parsers: docs/documents.md. This file imports
nothing, so that the CLI reads FORMATS without loading a model library.
"""

# The document formats `translate_document` knows; plain text ("text") is the line pipeline's.
FORMATS = ("html", "markdown")
