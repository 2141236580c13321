"""What a user asks of each text: the texts, and for each one its optional forced prefix,
direction, constraints and glossary (and, for a document's unit, the characters kept as written,
which the glossary skips), as one value that travels whole.

Every interface builds one (`tmt translate` from its files, the /v1 API and LibreTranslate's
routes from a request body, documents from their units) and every layer below takes it as it
is (`Translator.translate`, `Engine.submit`, `translate_stream`), so a per-text option is
checked in one place, here, and a new one is one more field rather than one more parallel
list through every signature. The rules about the options live here too: which texts may be
cut into sentences (`keeps_whole`) and what a dropped-content report cannot keep
(`refuse_report`).

A count that does not match the texts raises `TextsCountError`, which carries the field, so
that the CLI names the file that gave it and the API the body key, without reading messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformer_mt.errors import SettingError, TmtError, pair_items, string_items
from transformer_mt.inference.glossary import Glossary
from transformer_mt.inference.languages import Pair
from transformer_mt.inference.sentences import SplitLines

# The per-text fields of `Texts`, in the order of its constructor.
PER_TEXT_FIELDS = ("prefixes", "directions", "constraints", "glossaries", "kept")


class TextsCountError(SettingError, ValueError):
    """A per-text option given for a number of texts other than one each. `field` names it
    (one of PER_TEXT_FIELDS); both counts are kept for the interface's own words."""

    def __init__(self, field: str, given: int, n_texts: int):
        self.field, self.given, self.n_texts = field, given, n_texts
        super().__init__(field, given, f"need one per text ({n_texts})")


@dataclass(frozen=True)
class Texts:
    """Texts to translate with their per-text options; None for an option no text has.

    Attributes:
        texts: the texts (a line of `tmt translate`, a served text, a document's unit).
        prefixes: the target text each translation must start with ("" forces nothing).
        directions: (source, target) languages of each text; None: the translator's own.
        constraints: target phrases each translation must contain.
        glossaries: the glossary whose terms each text is searched for (None for a text
            without one); the targets of the terms a sentence holds are its constraints.
        kept: the (start, end) characters of each text kept as written (a document unit's
            code, `units.Unit.kept_spans`): not translated, so no glossary term is found in
            them.

    Raises:
        TextsCountError: an option not given once per text, naming the option.
    """

    texts: tuple[str, ...]
    prefixes: tuple[str, ...] | None = None
    directions: tuple[Pair, ...] | None = None
    constraints: tuple[tuple[str, ...], ...] | None = None
    glossaries: tuple[Glossary | None, ...] | None = None
    kept: tuple[tuple[tuple[int, int], ...], ...] | None = None

    def __post_init__(self) -> None:
        for name in PER_TEXT_FIELDS:
            given = getattr(self, name)
            if given is not None and len(given) != len(self.texts):
                raise TextsCountError(name, len(given), len(self.texts))

    @classmethod
    def of(
        cls,
        texts: Sequence[str],
        *,
        prefixes: Sequence[str] | None = None,
        directions: Sequence[Pair] | None = None,
        constraints: Sequence[Sequence[str]] | None = None,
        glossaries: Sequence[Glossary | None] | None = None,
        glossary: Glossary | None = None,
        kept: Sequence[Sequence[tuple[int, int]]] | None = None,
    ) -> Texts:
        """`Texts` from any sequences; `glossary`: one glossary for every text (not with
        `glossaries`)."""
        texts = string_items(texts, "texts")
        if prefixes is not None:
            prefixes = string_items(prefixes, "prefixes")
        if directions is not None:
            directions = pair_items(directions, "directions")
        if constraints is not None:
            constraints = [string_items(c, f"constraints[{i}]") for i, c in enumerate(constraints)]
        if glossary is not None:
            if glossaries is not None:
                raise TmtError("give one glossary for all texts or one per text, not both")
            glossaries = [glossary] * len(texts)
        return cls(
            texts,
            prefixes,
            None if directions is None else tuple(directions),
            None if constraints is None else tuple(constraints),
            None if glossaries is None else tuple(glossaries),
            None if kept is None else tuple(tuple(spans) for spans in kept),
        )

    @classmethod
    def plain(cls, texts: Texts | Sequence[str]) -> Texts:
        """`texts` as `Texts`: itself, or a sequence of strings with no options.

        Raises:
            SettingError: not a sequence of strings (a lone string: put it in a list).
        """
        if isinstance(texts, Texts):
            return texts
        return cls(string_items(texts, "texts"))

    def __len__(self) -> int:
        return len(self.texts)

    def prefix(self, i: int) -> str:
        """The forced prefix of text `i` ("": none)."""
        return "" if self.prefixes is None else self.prefixes[i]

    def direction(self, i: int) -> Pair | None:
        """The (source, target) languages of text `i` (None: the translator's own)."""
        return None if self.directions is None else self.directions[i]

    def phrases(self, i: int) -> tuple[str, ...]:
        """The constraints of text `i` (none: empty)."""
        return () if self.constraints is None else self.constraints[i]

    def glossary(self, i: int) -> Glossary | None:
        """The glossary of text `i` (None: none)."""
        return None if self.glossaries is None else self.glossaries[i]

    def keeps_whole(self, i: int) -> bool:
        """Whether text `i` is translated as one sentence: a forced prefix starts the text's
        translation and its own constraints belong to the whole text, so cutting it into
        sentences would force the prefix on its first sentence only, or ask each sentence
        for every phrase."""
        return bool(self.prefix(i).strip()) or any(p.strip() for p in self.phrases(i))

    def sentence_phrases(self, split: SplitLines) -> list[list[str]]:
        """The target phrases of each sentence of `split` (these texts cut into sentences):
        its text's constraints, then the target terms its text's glossary finds in the sentence
        outside its kept characters."""
        phrases = [list(self.phrases(owner)) for owner in split.owners]
        sentences = zip(phrases, split.sentences, split.owners, split.starts, strict=True)
        for found, sentence, owner, start in sentences:
            glossary = self.glossary(owner)
            if glossary is not None:
                found += glossary.targets(sentence, self._kept_in(owner, start, len(sentence)))
        return phrases

    def _kept_in(self, owner: int, start: int, length: int) -> list[tuple[int, int]]:
        """The kept characters of text `owner` within its `length` characters from `start`,
        counted from `start` (those of the sentence there)."""
        if self.kept is None:
            return []
        end = start + length
        spans = [(a, b) for a, b in self.kept[owner] if a < end and start < b]
        return [(max(a, start) - start, min(b, end) - start) for a, b in spans]

    def refuse_report(self) -> None:
        """Raise when a dropped-content report is asked of these texts: it retries a text cut
        at its sentence ends, which cannot keep a text's prefix or constraints.

        Raises:
            TmtError: prefixes or constraints were given.
        """
        if self.prefixes is not None or self.constraints is not None:
            raise TmtError(
                "a dropped-content report retries lines cut at their sentence ends, which "
                "cannot keep a line's prefix or constraints: check lines without them"
            )

    def picked(self, indices: Sequence[int]) -> Texts:
        """Texts `indices` with their options, in that order (an index may repeat): a chunk of
        a stream, the texts of retried sentences."""

        def pick(values: tuple | None) -> tuple | None:
            return None if values is None else tuple(values[i] for i in indices)

        return Texts(
            pick(self.texts),
            pick(self.prefixes),
            pick(self.directions),
            pick(self.constraints),
            pick(self.glossaries),
            pick(self.kept),
        )

    def of_texts(self, texts: Sequence[str]) -> Texts:
        """These options for other texts of the same number (the sentences a document
        unit's text became, say), but `kept`, which counts the characters of these texts."""
        return Texts(
            tuple(texts), self.prefixes, self.directions, self.constraints, self.glossaries
        )
