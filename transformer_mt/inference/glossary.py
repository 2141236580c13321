"""Glossaries: source terms whose target terms a translation must contain, and the files that
give them (docs/glossaries.md).

A glossary file is UTF-8 text, one term a line, `source term<TAB>target term`; a target equal
to its source is a do-not-translate term (a product name), which the translation holds as the
source text spells it. Blank lines are skipped; spaces around a term are not part of it.
`Glossary.targets` finds the source terms of one sentence at word boundaries (a term never
matches inside a longer word: "Hund" is not found in "Hunde" nor in "Schäferhund"), optionally
ignoring case, and never in text kept as written (a document's code). Where terms overlap, the
one that starts first wins, and of terms starting at the same word the longest ("New York City"
with "New York" and "York City" finds "New York"; with "New York City" too, that one). The
targets of the terms found are that sentence's constraints, which the `Translator` encodes with
the target tokenizer and beam search enforces (search/constraints.py). Matching on the text,
not on subwords, is what makes it subword-aware: a term is found whichever pieces the source
tokenizer would cut it into.

A constraints file (`iter_constraints`) gives each input line's target phrases directly,
TAB-separated, a blank line for none. `Texts.sentence_phrases` (requests.py) gives each sentence
its line's own phrases and its glossary's terms: `Translator.translate` and the server's engine
both ask it.

Bad input stops with one line naming the file and the line: no TAB, more than one, an empty
term, a term over `MAX_TERM_CHARS` or holding a byte order mark, text that is not UTF-8, a
source term given twice with different targets.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from transformer_mt.errors import TmtError, pair_items
from transformer_mt.text_files import iter_lines

# The most characters of a term. A term is a word or a short phrase; a longer one is a
# sentence, or two lines that lost the line break between them.
MAX_TERM_CHARS = 200
SOFT_HYPHEN = "\u00ad"


@dataclass(frozen=True)
class Term:
    """One glossary entry, with where it was read (to name it in errors)."""

    source: str
    target: str
    where: str  # "file:line"

    @property
    def keep_source(self) -> bool:
        """A do-not-translate term: the translation holds the source as the text spells it."""
        return self.source == self.target


class Glossary:
    """Terms found in source sentences and the target terms they call for.

    Args:
        terms: the entries; a source term given twice must have the same target.
        ignore_case: find source terms whatever their case ("Berlin" also as "BERLIN").

    Raises:
        TmtError: a source term given twice with different targets, naming both places.
    """

    def __init__(self, terms: Iterable[Term], ignore_case: bool = False):
        self.ignore_case = ignore_case
        self.terms: list[Term] = []
        seen: dict[str, Term] = {}
        for term in terms:
            key = self._text_key(term.source)  # as matching reads it
            first = seen.setdefault(key, term)
            if first is term:
                self.terms.append(term)
            elif first.target != term.target:
                raise TmtError(
                    f"{term.where}: source term {term.source!r} has target {term.target!r}, "
                    f"but {first.where} gives it {first.target!r}: keep one"
                )

    @classmethod
    def load(cls, path: str | Path, ignore_case: bool = False) -> Glossary:
        """The glossary of a TSV file (module docstring).

        Raises:
            TmtError: bad input, naming the file and line.
        """
        terms = []
        for number, line in enumerate(iter_lines(path), start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            columns = line.split("\t")
            if len(columns) != 2:
                found = "no TAB" if len(columns) == 1 else f"{len(columns) - 1} TABs"
                raise TmtError(f"{where}: {found}; a glossary line is source term TAB target term")
            terms.append(checked_term(*columns, where))
        return cls(terms, ignore_case)

    @classmethod
    def of_pairs(
        cls,
        pairs: Iterable[tuple[str, str]] | Mapping[str, str],
        ignore_case: bool = False,
        origin: str = "glossary",
    ) -> Glossary:
        """A glossary of (source, target) pairs given in code (a mapping: its items); `origin`
        names them in errors (`origin:1` for the first pair).

        Raises:
            SettingError: `pairs` is not a sequence of pairs of strings.
            TmtError: an empty or too long term, or a source given twice with different
                targets.
        """
        terms = [
            checked_term(source, target, f"{origin}:{number}")
            for number, (source, target) in enumerate(pair_items(pairs, "pairs"), start=1)
        ]
        return cls(terms, ignore_case)

    def targets(self, text: str, kept: Sequence[tuple[int, int]] = ()) -> list[str]:
        """The target terms of the source terms found in `text`, in text order, each once.

        `kept`: (start, end) characters of `text` kept as written (a document's code), which
        are not translated, so no term is found holding one. They are read as "_", a word
        character: they still join the words they touch ("Schäfer" is not found in
        "Schäfer<code>hund</code>") and a term beside them is still found ("New York" in
        "New York <code>City</code>", where "New York City" is a term too). A term holding "_"
        could match them, so a match is checked against `kept` as well.
        """
        if not self.terms:
            return []
        chars = list(text)
        for start, end in kept:
            chars[start:end] = "_" * (end - start)
        text, origin = normalized("".join(chars))
        found: dict[str, None] = {}
        for match in self._finder.finditer(text):
            first, last = origin[match.start()], origin[match.end()]
            if any(start < last and first < end for start, end in kept):
                continue
            term = self._by_text.get(self._text_key(match.group()))
            if term is None:  # `re` folds case char by char, `casefold` not always so
                named = self._naming.match(text, match.start())
                term = self._by_length[named.lastindex - 1]
            found[match.group() if term.keep_source else term.target] = None
        return list(found)

    def _text_key(self, text: str) -> str:
        """What a matched text and the source term it matches share: their words, in NFKC
        (`normalized`), in case folded when case is ignored."""
        return self._key(" ".join(unicodedata.normalize("NFKC", text).split()))

    @cached_property
    def _by_text(self) -> dict[str, Term]:
        """The terms by `_text_key` of their source, the first of `_by_length` where two
        share one (the alternative `_finder` takes)."""
        terms: dict[str, Term] = {}
        for term in self._by_length:
            terms.setdefault(self._text_key(term.source), term)
        return terms

    def _key(self, source: str) -> str:
        return source.casefold() if self.ignore_case else source

    @cached_property
    def _by_length(self) -> list[Term]:
        """The terms, longest source first: of the terms that start at one place, the longest
        is found (`re` takes the first alternative that matches at the leftmost place)."""
        return sorted(self.terms, key=lambda t: -len(t.source))

    @cached_property
    def _finder(self) -> re.Pattern[str]:
        """Every term, longest first, each at word boundaries; whitespace inside a term
        matches any run of whitespace. Without groups, and the term found looked up by its
        text (`_by_text`): with one group per term `re` runs 200x slower at 1,000 terms (at
        5,000, 241 ms against 0.17 ms to search a sentence of 100 characters)."""
        return self._alternation("(?:")

    @cached_property
    def _naming(self) -> re.Pattern[str]:
        """`_finder` with one group per term, matched only where `_finder` found a text
        `_by_text` lacks: `lastindex` names the term (the alternative `_finder` took)."""
        return self._alternation("(")

    def _alternation(self, opening: str) -> re.Pattern[str]:
        terms = "|".join(
            opening + r"\s+".join(map(re.escape, normalized(t.source)[0].split())) + ")"
            for t in self._by_length
        )
        flags = re.IGNORECASE if self.ignore_case else 0
        inside = f"[\\w{_joining_marks()}]"
        return re.compile(rf"(?<!{inside})(?:{terms})(?!{inside})", flags)


@functools.cache
def _joining_marks() -> str:
    """The characters that belong to the word around them though `re`'s `\\w` leaves them out,
    as a regular expression's class body: every combining mark (categories Mn, Mc, Me: the
    vowel signs of Indic scripts, Arabic's tanwin), the zero-width joiner and non-joiner
    (inside Persian and Indic words). Without them "राम" was found in "रामायण", "किताब" in
    "किताबें", "خواهم" in "می‌خواهم". Read from Python's Unicode tables once (0.13 s)."""
    marks = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c))[0] == "M"]
    ranges: list[list[int]] = []
    for code in [*marks, 0x200C, 0x200D]:
        if ranges and code == ranges[-1][1] + 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    )


def normalized(text: str) -> tuple[str, list[int]]:
    """`text` in NFKC, as the model's tokenizer reads it (SentencePiece's nmt_nfkc), and where
    in `text` each of its characters comes from (one more: the end). A term and a text that
    spell one word differently (a decomposed "café" or "한국" from macOS, a full-width
    "ｉＰｈｏｎｅ", half-width "ｶﾞﾑ") are then one. Each run of characters that normalising
    joins (a letter and its accents, Hangul jamo, a kana and its voicing mark) is normalised
    alone, so that the origin of every character is known. A soft hyphen (U+00AD, HTML's
    `&shy;`: where a word may break, not a letter) is left out: "Schäfer&shy;hund" is the
    word "Schäferhund", in which "Hund" is not found.
    """
    if SOFT_HYPHEN not in text and unicodedata.is_normalized("NFKC", text):
        return text, list(range(len(text) + 1))

    def nfkc(part: str) -> str:
        return unicodedata.normalize("NFKC", part)

    parts: list[str] = []
    origin: list[int] = []
    start = 0
    for i in range(1, len(text) + 1):
        if i < len(text) and nfkc(text[start : i + 1]) != nfkc(text[start:i]) + nfkc(text[i]):
            continue  # joined to the characters before it
        part = nfkc(text[start:i]).replace(SOFT_HYPHEN, "")
        parts.append(part)
        origin += [start] * len(part)
        start = i
    origin.append(len(text))
    return "".join(parts), origin


def iter_constraints(path: str | Path) -> Iterator[list[str]]:
    """Each line's target phrases from a constraints file, one line at a time (files of any
    size): TAB-separated, a blank line (or blank fields) for none.

    Raises:
        TmtError: text that is not UTF-8, or a phrase over `MAX_TERM_CHARS`, naming the file
            and line, when that line is reached.
    """
    for number, line in enumerate(iter_lines(path), start=1):
        phrases = [p.strip() for p in line.split("\t") if p.strip()]
        for phrase in phrases:
            _check_length(phrase, "phrase", f"{path}:{number}")
        yield phrases


def checked_term(source: str, target: str, where: str) -> Term:
    """A glossary entry read at `where`, its terms without the spaces around them.

    Raises:
        TmtError: an empty term or one over `MAX_TERM_CHARS`, naming `where`.
    """
    return Term(
        checked_phrase(source, "source term", where),
        checked_phrase(target, "target term", where),
        where,
    )


def checked_phrase(text: str, what: str, where: str) -> str:
    """`text` without the spaces around it, refused when empty, too long, or holding a byte
    order mark (U+FEFF: the start of a second file joined on with `cat`, which no sentence
    holds, so the term would never be found); `what` names it in the error ("source term",
    "phrase")."""
    phrase = text.strip()
    if not phrase:
        raise TmtError(f"{where}: empty {what}")
    if "\ufeff" in phrase:
        raise TmtError(
            f"{where}: {what} {phrase!r} holds a byte order mark (U+FEFF), as where two files "
            "were joined; remove it"
        )
    _check_length(phrase, what, where)
    return phrase


def _check_length(text: str, what: str, where: str) -> None:
    if len(text) > MAX_TERM_CHARS:
        raise TmtError(
            f"{where}: {what} of {len(text)} characters; the limit is {MAX_TERM_CHARS} "
            "(a term is a word or a short phrase)"
        )
