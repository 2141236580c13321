"""LineSettings: how a Translator reads and answers the lines it is given, beyond the search
settings of `DecodeConfig` (alignments, languages, sentence splitting)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_mt.inference.languages import Pair


@dataclass(frozen=True)
class LineSettings:
    """How a Translator treats the lines it is given, beyond the search (`DecodeConfig`).

    Attributes:
        alignment_layer: None (no alignments), or the decoder layer whose cross-attention
            aligns target to source subwords; negative values count from the last.
        src_lang, tgt_lang: the languages of a model with language tags (a multilingual
            OPUS-MT model needs tgt_lang, NLLB both); a model without ignores them. The
            direction of every line that is not given its own.
        trained: the (source, target) pairs the model was trained on (its checkpoint's
            `data.directions()`), for `Translator.languages`.
        split_sentences: split lines into sentences before searching (see the module).
        split_lang: the language whose sentence rules split lines that name none (a model
            without tags: its checkpoint's `data.src_lang`); None: src_lang, else English
            rules (`sentences.split_line`).
    """

    alignment_layer: int | None = None
    src_lang: str | None = None
    tgt_lang: str | None = None
    trained: tuple[Pair, ...] = ()
    split_sentences: bool = True
    split_lang: str | None = None
