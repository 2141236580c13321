"""Sentences inside a line: a paragraph is translated sentence by sentence.

Our models learn from single sentences, and a line holding several gets a fraction of a
translation: the de-en rope model scores 42.5 BLEU on single test2016 sentences, about 23 on
two joined into one line, 14.5 on three and under 2 on eight, its output stopping after the
first sentence or two (docs/results.md). So `Translator.translate` cuts every line into its
sentences (`split_line`), searches the sentences of all its lines as one list (`SplitLines`)
and puts each line's translations back together (`Segments.join`): one line in, one line out.

The splitter is sentencex (Wikimedia's: rules of its own for 31 languages, MediaWiki's fallback
chains for about 300, Czech split by the Slovak rules), chosen by measurement against pySBD,
Bling Fire, the Moses splitter's port and syntok on test2016 captions joined 2, 4 and 8 to a
line (scripts/bench_splitters.py; docs/results.md, "Sentence splitters on joined Multi30k
captions"): it gives back 99.6% of the en/de/fr/cs/ja lines of two marked sentences exactly
and 98.1% of those of eight (pySBD: 100% and 99.5%, but it drops leading spaces, slows down
faster than the text grows and has had no release since 2021), at 270,000 lines of eight
sentences a second, its pieces always concatenating to the line. Its misses there: a sentence
that starts with a digit ("... Motorrad. 6 Personen ...") stays with the one before, and
English "art." reads as an abbreviation. Known misses beyond Multi30k: French "M. Dupont" and
"Dr. Martin" are split after the title, German ordinals ("das 3. Mal") end a sentence. A
language with no rules of its own, and none to fall back to, is split by English rules, with
no error: sentence ends marked by `.`, `!`, `?` and their CJK forms are common to most
scripts.

What this module adds to the splitter:

- Exact text. The whitespace before the first sentence, between sentences and after the
  last is kept verbatim, so `split_line(line).join(its own sentences)` is `line` byte for
  byte and the translation of a split line keeps its spacing (double spaces, tabs), but
  between sentences where the scripts differ (`between`): Japanese and Chinese write no
  space after a sentence, English does, whatever the line had there.
- Quotations. sentencex ends a Japanese, Korean or Chinese sentence at or before the closing
  mark of a quotation the sentence goes on after (「走れ！」と言った。, 『走れ！』と言った。,
  "뛰어!"라고 말했다., "“快跑！”他说。"); such pieces are joined again (`_quotations_kept`).
- Line breaks. A text may hold several lines (a served text: a LibreTranslate client sends a
  textarea's paragraphs as one; a file's lines hold none). Each line is split as a line
  alone (`split_text`), and the line breaks (`\n`, `\r\n`) go back verbatim between
  the translations of the lines around them; a blank line stays blank. sentencex reads a
  single line break as a space inside a sentence, so the lines of a paragraph without final
  stops became one sentence.
- A line of one sentence, or of none (a blank line), is one segment: the line itself,
  whitespace and all. It reaches the model exactly as before splitting existed, so outputs
  of single sentences do not change.
- Language codes. A model's codes are ISO 639-1 (`de`), ISO 639-3 (`deu`, multilingual
  OPUS-MT) or NLLB's `deu_Latn`; sentencex knows languages by MediaWiki's codes, ISO 639-1
  where there is one (a three-letter code it reads as English). `splitter_language` maps
  them.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from sentencex import segment

from transformer_mt.errors import TmtError
from transformer_mt.langid import iso_code
from transformer_mt.writing_systems import ends_unspaced, without_direction_passages

T = TypeVar("T")

# ISO 639-3 -> ISO 639-1, for every language that has a two-letter code.
_ISO_PAIRS = """
    aar:aa abk:ab ave:ae afr:af aka:ak amh:am arg:an ara:ar asm:as ava:av aym:ay aze:az bak:ba
    bel:be bul:bg bis:bi bam:bm ben:bn bod:bo bre:br bos:bs cat:ca che:ce cha:ch cos:co cre:cr
    ces:cs chu:cu chv:cv cym:cy dan:da deu:de div:dv dzo:dz ewe:ee ell:el eng:en epo:eo spa:es
    est:et eus:eu fas:fa ful:ff fin:fi fij:fj fao:fo fra:fr fry:fy gle:ga gla:gd glg:gl grn:gn
    guj:gu glv:gv hau:ha heb:he hin:hi hmo:ho hrv:hr hat:ht hun:hu hye:hy her:hz ina:ia ind:id
    ile:ie ibo:ig iii:ii ipk:ik ido:io isl:is ita:it iku:iu jpn:ja jav:jv kat:ka kon:kg kik:ki
    kua:kj kaz:kk kal:kl khm:km kan:kn kor:ko kau:kr kas:ks kur:ku kom:kv cor:kw kir:ky lat:la
    ltz:lb lug:lg lim:li lin:ln lao:lo lit:lt lub:lu lav:lv mlg:mg mah:mh mri:mi mkd:mk mal:ml
    mon:mn mar:mr msa:ms mlt:mt mya:my nau:na nob:nb nde:nd nep:ne ndo:ng nld:nl nno:nn nor:no
    nbl:nr nav:nv nya:ny oci:oc oji:oj orm:om ori:or oss:os pan:pa pli:pi pol:pl pus:ps por:pt
    que:qu roh:rm run:rn ron:ro rus:ru kin:rw san:sa srd:sc snd:sd sme:se sag:sg sin:si slk:sk
    slv:sl smo:sm sna:sn som:so sqi:sq srp:sr ssw:ss sot:st sun:su swe:sv swa:sw tam:ta tel:te
    tgk:tg tha:th tir:ti tuk:tk tgl:tl tsn:tn ton:to tur:tr tso:ts tat:tt twi:tw tah:ty uig:ug
    ukr:uk urd:ur uzb:uz ven:ve vie:vi vol:vo wln:wa wol:wo xho:xh yid:yi yor:yo zha:za zho:zh
    zul:zu
"""
ISO_639_1 = dict(pair.split(":") for pair in _ISO_PAIRS.split())


def splitter_language(code: str | None) -> str:
    """The code sentencex knows the language of `code` by: ISO 639-1 where the language has
    one (`deu_Latn`, `deu` and `de` -> `de`), else the ISO 639-3 code, which MediaWiki's
    fallbacks may know (`bar` -> German rules) and sentencex otherwise reads as English.
    None (a model that names no language): `en`."""
    if not code:
        return "en"
    base = iso_code(code)
    return ISO_639_1.get(base, base)


@dataclass(frozen=True)
class Segments:
    """One line as its sentences and the text around them, so that

        line == separators[0] + sentences[0] + separators[1] + ... + sentences[-1]
                + separators[-1]

    `sentences` start and end with no whitespace nor format character (`_trimmed`), except
    the one sentence of a line that is not split (`whole`); `separators` hold the rest,
    verbatim (one more than sentences)."""

    sentences: tuple[str, ...]
    separators: tuple[str, ...]

    @classmethod
    def whole(cls, line: str) -> Segments:
        """`line` as one sentence, untouched."""
        return cls((line,), ("", ""))

    @cached_property
    def source_spans(self) -> list[tuple[int, int]]:
        """Where each of `sentences` is in the line."""
        found, at = [], 0
        for separator, text in zip(self.separators[:-1], self.sentences, strict=True):
            at += len(separator)
            found.append((at, at + len(text)))
            at += len(text)
        return found

    def spans(self, texts: Sequence[str]) -> list[tuple[int, int]]:
        """Where each of `texts`, one per sentence, is in `join(texts)`."""
        pieces = self._joined(texts)
        found, at = [], 0
        for i, piece in enumerate(pieces):
            if i % 2:
                found.append((at, at + len(piece)))
            at += len(piece)
        return found

    def join(self, translations: Sequence[str]) -> str:
        """The translations of `sentences`, in order, with the separators around them: the
        text before the first and after the last as in the line; between two, the line's
        (`between`); the bidi controls of a passage left out.

        Raises:
            TmtError: not one translation per sentence.
        """
        return "".join(self._joined(translations))

    def _joined(self, translations: Sequence[str]) -> list[str]:
        """separator, translation, separator, ..., separator: what `join` writes."""
        if len(translations) != len(self.sentences):
            raise TmtError(
                f"{len(translations)} translations for {len(self.sentences)} sentences; "
                "give one each"
            )
        # A passage's bidi controls are left out as the sentences' own are (a closer inside a
        # sentence was lost, its opener kept: `writing_systems.without_direction_passages`).
        separators = [without_direction_passages(s) for s in self.separators]
        pieces = [separators[0]]
        for i, text in enumerate(translations):
            if i:
                pieces.append(between(separators[i], pieces[-1], text, self.sentences[i - 1]))
            pieces.append(text)
        pieces.append(separators[-1])
        return pieces


def between(separator: str, before: str, after: str, source: str = "") -> str:
    """What joins the translations `before` and `after` of two sentences that `separator` stood
    between in the line (`source`: the sentence `before` translates). A plain joint (nothing,
    one space, or the spacing of scripts written without spaces: an ideographic or zero-width
    space) becomes the target script's: nothing after a translation ending in such a script
    (a Japanese "。"), one space after a sentence of such a script translated into another one,
    or where the line had nothing. Any other separator stays as it is (a line break, a tab,
    two spaces).
    """
    if not before or not after:
        return separator
    spacing = separator != "" and all(
        c == "\u3000" or unicodedata.category(c) == "Cf" for c in separator
    )
    if ends_unspaced(before):
        return "" if separator in ("", " ") or spacing else separator
    if separator == "" or (spacing and ends_unspaced(source)):
        return " "
    return separator


def split_line(line: str, lang: str | None = None) -> Segments:
    """`line` cut into sentences by the rules of `lang` (a model's code, see
    `splitter_language`; None: English rules).

    A line in which the splitter finds fewer than two sentences is `Segments.whole(line)`.
    """
    spans, start = [], 0
    for piece in segment(splitter_language(lang), line):
        text = _trimmed(piece)
        if not text:
            continue
        begin = line.find(text, start)
        if begin < 0:  # a splitter that rewrote the text: sentencex never does (measured)
            return Segments.whole(line)
        spans.append((begin, begin + len(text)))
        start = begin + len(text)
    spans = _quotations_kept(line, spans, splitter_language(lang))
    if len(spans) < 2:
        return Segments.whole(line)
    edges = [0, *itertools.chain.from_iterable(spans), len(line)]
    separators = tuple(line[a:b] for a, b in zip(edges[::2], edges[1::2], strict=True))
    return Segments(tuple(line[a:b] for a, b in spans), separators)


# A line ends at a line feed, as in files (a lone carriage return inside a file's line is no
# line end to `tmt translate`, nor would it be to the output's readers if it came back there).
LINE_BREAK = re.compile(r"(\r?\n)")


def split_text(text: str, lang: str | None = None) -> Segments:
    """`text` as the sentences of its lines (see the module), each line cut by `split_line`
    (by the rules of `lang`)."""
    pieces = LINE_BREAK.split(text)
    lines, breaks = pieces[::2], pieces[1::2]
    cut = [split_line(line, lang) for line in lines]
    if not breaks:
        return cut[0]
    found: list[str] = []
    separators = [""]
    for i, (line, segments) in enumerate(zip(lines, cut, strict=True)):
        if i:
            separators[-1] += breaks[i - 1]
        if not line.strip():  # a blank line: nothing to translate, kept as it is
            separators[-1] += line
            continue
        separators[-1] += segments.separators[0]
        for sentence, after in zip(segments.sentences, segments.separators[1:], strict=True):
            found.append(sentence)
            separators.append(after)
    if not found:  # blank lines only: kept as they are, around an empty sentence
        return Segments(("",), ("", text))
    return Segments(tuple(found), tuple(separators))


# Closing quotation marks: a quotation ending in one may go on as the same sentence (_GOES_ON);
# a piece that starts with one of the unambiguous ones (not `"` or `'`, which open quotations
# as often) is the end of the sentence before it (sentencex cuts `彼は『走れ！』と言った。`
# before the 』).
_CLOSING = "」』”’\"'）)"
_ONLY_CLOSING = "」』”’）)"
# What goes on after a quotation in the same sentence, by language: the Japanese and Korean
# quotative particles (「走れ！」と言った, と彼は言った, って, など; "뛰어!"라고 말했다; not とても,
# ところ, which start sentences); in Chinese, anything after a quotation that ends in "！" or
# "？" ("“快跑！”他说。"), as one ending in "。" ends its sentence in Chinese usage.
_GOES_ON = {
    "ja": re.compile(r"(?:って|と(?!ても|ころ)|など)"),
    "ko": re.compile(r"(?:이?라고|하고|고\s)"),
    "zh": re.compile(r"(?![“「『（(\"'])"),
}


def _quotations_kept(line: str, spans: list[tuple[int, int]], lang: str) -> list[tuple[int, int]]:
    """`spans` (of sentences in `line`) with a sentence that sentencex ended inside a
    Japanese, Chinese or Korean sentence, at or after a quotation, joined to the rest of it."""
    goes_on = _GOES_ON.get(lang)
    if goes_on is None or len(spans) < 2:
        return spans
    kept = [spans[0]]
    for begin, end in spans[1:]:
        before, after = line[kept[-1][0] : kept[-1][1]], line[begin:end]
        quoted = before.endswith(tuple(_CLOSING)) and (
            lang != "zh" or before.rstrip(_CLOSING).endswith(("！", "？", "!", "?"))
        )
        closes = after.startswith(tuple(_ONLY_CLOSING))
        joins = closes or (quoted and goes_on.match(after) is not None)
        kept[-1:] = [(kept[-1][0], end)] if joins else [kept[-1], (begin, end)]
    return kept


def _trimmed(piece: str) -> str:
    """`piece` without the whitespace and format characters (zero-width space, bidi marks,
    U+FEFF: category Cf) at its ends, which go to the separators: a sentence that started
    with "\u200b " had taken the space along into its translation, and the sentences' joint
    lost it ("running.A man")."""
    begin, end = 0, len(piece)
    while begin < end and _edge(piece[begin]):
        begin += 1
    while end > begin and _edge(piece[end - 1]):
        end -= 1
    return piece[begin:end]


def _edge(char: str) -> bool:
    return char.isspace() or unicodedata.category(char) == "Cf"


@dataclass(frozen=True)
class SplitLines:
    """The sentences of many lines as one list, and the way back: a batch of lines becomes
    one batch of sentences for the search, whose results `regroup` hands back per line."""

    lines: tuple[Segments, ...]

    @classmethod
    def of(cls, lines: Sequence[str], langs: Sequence[str | None]) -> SplitLines:
        """Each of `lines` split by the rules of its language in `langs` (`split_line`)."""
        return cls(tuple(split_line(line, lang) for line, lang in zip(lines, langs, strict=True)))

    @cached_property
    def sentences(self) -> list[str]:
        """The sentences of every line, line after line."""
        return [text for segments in self.lines for text in segments.sentences]

    @cached_property
    def owners(self) -> list[int]:
        """The index of the line each of `sentences` comes from."""
        return [i for i, segments in enumerate(self.lines) for _ in segments.sentences]

    @cached_property
    def starts(self) -> list[int]:
        """Where each of `sentences` starts in its line (`Segments`: the separators and the
        sentences before it, in order)."""
        return [start for s in self.lines for start, _ in s.source_spans]

    def regroup(self, items: Sequence[T]) -> list[list[T]]:
        """`items`, one per sentence of `sentences`, as one list per line.

        Raises:
            TmtError: not one item per sentence.
        """
        if len(items) != len(self.sentences):
            raise TmtError(f"{len(items)} results for {len(self.sentences)} sentences")
        found = iter(items)
        return [list(itertools.islice(found, len(s.sentences))) for s in self.lines]

    def join(self, translations: Sequence[str]) -> list[str]:
        """One translated line per line, from one translation per sentence."""
        per_line = self.regroup(translations)
        return [s.join(texts) for s, texts in zip(self.lines, per_line, strict=True)]
