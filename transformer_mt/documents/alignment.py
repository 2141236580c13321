"""Word alignments of translations from a `Translator`'s cross-attention: what documents need to
put inline markup back around the right target words (placement.py).

`AlignedTranslator` translates unit texts through the one pipeline (`Translator.translate`),
then aligns each translation in one forced pass of the model over the source and the
translation re-encoded by the target tokenizer, with `alignment_pairs` (the function behind
`tmt translate --alignments`). Not the translator's own alignments: a `Translation` holds its
text, not the subwords its search produced, so its subword indices cannot be told apart into
words; the forced pass aligns subwords we know, and costs what the translator's own pass costs
(one forward pass per unit), which is therefore left off. The server's engine, which answers
with texts only, can be aligned the same way.

Subwords to words (`word_numbers`): the words are those placement counts, a text's
whitespace-separated words (`units.WORD`), on both sides. A SentencePiece piece that starts with
"▁" starts a word of SentencePiece's, which is not always one of the text's: its normalisation
cuts a word at a zero-width space, ZWNJ or U+FEFF and at a spacing accent ("fährt´s" is
"▁fährt ▁ ́s"), so its words are counted word by word of the text.

A unit translated sentence by sentence (as the Translator splits text) is aligned so, each
sentence with its translation, then numbered by the unit's words: the model aligns what it
translated, and a unit longer than the position table aligns to its end. Only a single
sentence cut to the position table aligns its first words only.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import torch

from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.documents.units import WORD, AlignedText, UnitTexts
from transformer_mt.errors import SettingError

# The layer check has one owner, cross_attention (the message names alignment_layer).
from transformer_mt.inference.cross_attention import alignment_pairs, check_alignment_layer
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translation import Translation
from transformer_mt.inference.translator import Translator
from transformer_mt.progress import Counted, ProgressReport, Reports, silent

WORD_START = "\u2581"  # SentencePiece's mark of a piece that starts a word
BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")  # byte fallback's piece of one UTF-8 byte
RUN = re.compile(r"\S+")  # what SentencePiece encodes as words of its own: no space inside

# The two passes over a document's units, as progress counts them: the translation, then the
# forced pass that aligns each unit (about as long again).
UNITS_TRANSLATED = Counted("translated", "units", "units", "translating")
UNITS_ALIGNED = Counted("aligned", "units", "units", "placing markup")


class AlignedTranslator:
    """A Translator as documents use it (`units.Translate`): unit texts in, each one's best
    translation with its (source word, target word) alignment out.

    Args:
        translator: translates, with its decode settings, and aligns with its model; build it
            without `alignment_layer` (its own alignments would be computed and not used).
        layer: the decoder layer whose cross-attention aligns; negative counts from the last.
        document: the document as one text with its options (`document_request`): its
            direction (None: the translator's own) and its glossary, which every unit is
            translated with; None: none.
        progress: makes the report of each pass over the units (`progress.Reports`); None: silent.

    Raises:
        SettingError: a layer the model lacks (naming alignment_layer), a direction the model
            has no tags for (naming src_lang or tgt_lang), an option no unit can keep.
    """

    def __init__(
        self,
        translator: Translator,
        layer: int = -1,
        document: Texts | None = None,
        progress: Reports | None = None,
    ):
        check_alignment_layer(layer, translator.model.cfg.decoder_layers)
        self.document = document_request(document or Texts(("",)))
        self.translator, self.layer, self.progress = translator, layer, progress
        (self.direction,) = translator.directions_of(self.document)

    def __call__(self, texts: UnitTexts) -> list[AlignedText]:
        units = self.document.picked([0] * len(texts)).of_texts(texts)
        units = replace(units, kept=texts.kept_spans())  # no glossary term found in code
        with self._report(UNITS_TRANSLATED, len(texts)) as report:
            translations = self.translator.translate(units, report.update)
        aligned = []
        with self._report(UNITS_ALIGNED, len(texts)) as report:
            for source, translation in zip(texts, translations, strict=True):
                aligned.append(self.aligned(source, translation))
                report.update(1)
        return aligned

    @contextmanager
    def _report(self, counted: Counted, total: int) -> Iterator[ProgressReport]:
        """The progress of one pass over the units, closed after it; a silent one without
        `progress`."""
        report = (self.progress or silent)(counted, total)
        try:
            yield report
        finally:
            report.close()

    def aligned(self, source: str, translation: Translation) -> AlignedText:
        """The best of `translation` as the translation of `source`, aligned word by word:
        sentence by sentence where it was translated so (`Translation.sentences`), as the
        model saw them, so that a unit longer than the position table aligns to its end;
        else whole (`align`)."""
        target = translation.texts[0]
        if not translation.sentences:
            return self.align(source, target)
        src_starts = [m.start() for m in WORD.finditer(source)]
        tgt_starts = [m.start() for m in WORD.finditer(target)]
        links = set()
        for (src_at, src_end), (tgt_at, tgt_end) in translation.sentences:
            part = self.align(source[src_at:src_end], target[tgt_at:tgt_end])
            src_words = _words_in(source, src_at, src_end, src_starts)
            tgt_words = _words_in(target, tgt_at, tgt_end, tgt_starts)
            links.update((src_words[s], tgt_words[t]) for s, t in part.pairs)
        return AlignedText(target, tuple(sorted(links)))

    def align(self, source: str, target: str) -> AlignedText:
        """`target` as the translation of `source`, aligned word by word in one forced pass."""
        translator, direction = self.translator, self.direction
        source_tags, target_tags = len(direction.source_prefix), len(direction.target_prefix)
        # `translate` counted what it truncated or untagged, and the CLI reports those counts.
        src_ids = translator.encoding.source_ids(source, direction, count=False)
        tgt_ids = translator.encoding.prefix_ids(target, direction)
        if not src_ids or len(tgt_ids) == target_tags:
            return AlignedText(target, ())
        src = torch.tensor([*src_ids, translator.specials.eos], device=translator.device)
        pairs = alignment_pairs(
            translator.model,
            src,
            tgt_ids,
            self.layer,
            translator.specials.bos,
            source_tags,
            target_tags,
        )
        src_words = word_numbers(translator.src_tokenizer, source, src_ids[source_tags:])
        tgt_words = word_numbers(translator.tgt_tokenizer, target, tgt_ids[target_tags:])
        links = {(src_words[s], tgt_words[t]) for s, t in pairs}
        return AlignedText(target, tuple(sorted(links)))


def _words_in(text: str, start: int, end: int, word_starts: Sequence[int]) -> list[int]:
    """The word of `text` (numbered as `word_starts`, where its words start) that each word of
    `text[start:end]` is part of: the same word, or one joined to a neighbour's where two
    sentences meet with no space between them."""
    return [
        bisect.bisect_right(word_starts, m.start()) - 1 for m in WORD.finditer(text, start, end)
    ]


def word_numbers(tokenizer: Tokenizer, text: str, ids: Sequence[int]) -> list[int]:
    """The word of `text` (0, 1, ...: its `units.WORD` words, as placement counts them) each
    subword of `ids` belongs to; `ids`: `text`'s subwords, or their start (a cut source).

    Each whitespace-separated run of `text` is encoded alone to count the SentencePiece words
    it becomes (two for "Ein\u200bMann", none for a lone zero-width space), and SentencePiece
    word n of `ids` belongs to the run its count reaches. A tokenizer that keeps runs of spaces
    (SentencePiece's `remove_extra_whitespaces` off) may find more words in the whole text than
    run by run: those extra words belong to the last run, not out of range. A run of several
    words (`これは学生です`, one character a word) is shared among its pieces by the bytes
    of normalised text each stands for.
    """
    runs = list(RUN.finditer(text))
    rows = tokenizer.encode_batch([run.group() for run in runs], num_threads=1)
    counts = [piece_words(tokenizer, row)[-1] + 1 if row else 0 for row in rows]
    owners = [n for n, count in enumerate(counts) for _ in range(count)]
    words = list(WORD.finditer(text))
    # Where each run's words end, in bytes of the run as the tokenizer normalised it (NFKC).
    ends: list[list[int]] = [[] for _ in runs]
    firsts: list[int] = [len(words)] * len(runs)
    run = 0
    for i, word in enumerate(words):
        while word.start() >= runs[run].end():
            run += 1
        firsts[run] = min(firsts[run], i)
        done = ends[run][-1] if ends[run] else 0
        ends[run].append(done + len(unicodedata.normalize("NFKC", word.group()).encode()))
    numbers: list[int] = []
    at, previous = 0, -1  # at: bytes of the run that the pieces before stand for
    for token, sp_word in zip(ids, piece_words(tokenizer, ids), strict=True):
        run = owners[min(sp_word, len(owners) - 1)]
        if run != previous:
            at, previous = 0, run
        within = bisect.bisect_right(ends[run], at)  # the word whose bytes hold byte `at`
        numbers.append(firsts[run] + min(within, len(ends[run]) - 1))
        at += _piece_bytes(tokenizer.id_to_piece(token))
    return numbers


def _piece_bytes(piece: str) -> int:
    """The bytes of normalised text a piece stands for: a byte piece (`<0xE3>`) one, an
    unknown one a character of the scripts that have many (three), the word mark none."""
    if BYTE_PIECE.fullmatch(piece):
        return 1
    if piece.startswith("<") and piece.endswith(">"):
        return 3
    return len(piece.removeprefix(WORD_START).encode())


def piece_words(tokenizer: Tokenizer, ids: Sequence[int]) -> list[int]:
    """The SentencePiece word (0, 1, ...) each subword of `ids` belongs to: a piece that starts
    with "▁" starts one, and so does the first."""
    numbers, word = [], -1
    for token in ids:
        if word < 0 or tokenizer.id_to_piece(token).startswith(WORD_START):
            word += 1
        numbers.append(word)
    return numbers


def document_request(document: Texts) -> Texts:
    """`document`, one text with its options, checked for what its units can keep: its
    direction and glossary (each sentence of a unit is searched for the terms). A forced
    prefix or constraints belong to one text's translation, and a document's translation is
    many units' (which unit would a phrase go to?), so they are refused.

    Raises:
        SettingError: more than one text, or a prefix or constraints, naming the option.
    """
    if len(document) != 1:
        raise SettingError("document", len(document), "one document at a time")
    for option in ("prefixes", "constraints"):
        if getattr(document, option) is not None:
            raise SettingError(
                option, None, "a document is translated unit by unit: give a glossary instead"
            )
    return document
