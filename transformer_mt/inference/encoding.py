"""Lines of text as the ids a search reads, within the model's position table: a source after
its direction's language tags, a forced target prefix, a sentence's constraint phrases; and
what was changed on the way (lines cut, tags taken out), counted for the user's summary.

The position table holds every source and its EOS, and every forced prefix and the token after
it, so sources and prefixes are cut to `max_positions - 1` tokens with their tags (or, where
the caller cannot tell its user, refused: `LineTooLong`). A source line too long for the table
is encoded from its start only, so that a line of megabytes costs what the table holds
(SentencePiece took 840 MB for one of 20 MB). A language tag a user typed (`>>fra<<`) is
taken out of a source as training takes it out of its text (`data.typed_tags`): the direction
alone picks the language; so is a typed back-translation tag (`<BT>`), which a model trained
on tagged back-translation would read as its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformer_mt.data.specials import SpecialTokens
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.data.typed_tags import TypedTags
from transformer_mt.errors import TmtError
from transformer_mt.inference.constrained import ConstraintsError, check_prefix, phrase_ids
from transformer_mt.inference.glossary import Glossary
from transformer_mt.inference.languages import Direction
from transformer_mt.writing_systems import without_direction_passages, writes_without_spaces

# A source line longer than this many characters per token of the position table's room is
# encoded from its start: first that much of it, then four times more while the tokens found
# do not pass the room by a margin (whitespace that SentencePiece folds, typed tags taken
# out). The margin keeps the cut's own pieces, which can differ from the whole line's where
# the cut falls inside a word, out of the tokens kept.
CHARS_PER_TOKEN = 64
CUT_MARGIN = 64


class LineTooLong(TmtError):
    """A source line holds more tokens than the position table's room (`tokens` None: the
    line's start alone holds more)."""

    def __init__(self, tokens: int | None, room: int):
        self.tokens, self.room = tokens, room
        held = "more" if tokens is None else str(tokens)
        super().__init__(f"{held} source tokens; the model reads at most {room}")


class LineEncoding:
    """A model's tokenizers and position table: text in, the ids a search reads out.

    Args:
        tokenizers: (source, target).
        specials: the model's special ids and language tags.
        max_positions: the model's position table.
        default: the direction of a line given none.
    """

    def __init__(
        self,
        tokenizers: tuple[Tokenizer, Tokenizer],
        specials: SpecialTokens,
        max_positions: int,
        default: Direction,
    ):
        self.src, self.tgt = tokenizers
        self.specials = specials
        self.default = default
        # Tags a user typed do not switch the language, nor mark the text as back-translated:
        # they are taken out of the text.
        self._typed_tags = TypedTags.of(self.src, specials, back_translation=True)
        # Tokens a line and its tags, or a forced prefix and its tags, may take: the position
        # table also holds the EOS (the prefix: the token after it).
        self._room = max_positions - 1
        self.max_src_tokens = self._room - len(default.source_prefix)
        self.truncated_lines = 0
        self.tagged_lines = 0  # lines that held a language tag or <BT>, taken out

    def source_ids(
        self,
        line: str,
        direction: Direction | None = None,
        count: bool = True,
        cut: bool = True,
    ) -> list[int]:
        """The subword ids of one line, after the language tags of `direction` (None: the
        default), cut to the position table; [] for a line with nothing to translate.

        A language tag in the text (`>>fra<<` typed by a user) is taken out and, with `count`,
        counted (`tagged_lines`), as is a line cut (`truncated_lines`): the language comes from
        the direction alone, never switched by what a line holds. A line read again after its
        translation (alignments, checks) is not counted twice: `count` False.

        Raises:
            LineTooLong: with `cut` False, a line the position table cannot hold whole.
        """
        ids, tagged, truncated = self._source_ids(line, direction, cut)
        if count:
            self.tagged_lines += tagged
            self.truncated_lines += truncated
        return ids

    def sentence_ids(
        self, sentences: Sequence[str], directions: Sequence[Direction], owners: Sequence[int]
    ) -> list[list[int]]:
        """`source_ids` of the sentences of some lines (`owners`: the line of each), a line
        counted once however many of its sentences held a tag or were cut."""
        found = [self._source_ids(*pair, True) for pair in zip(sentences, directions, strict=True)]
        tagged, cut = set(), set()
        for line, (_, held_tag, was_cut) in zip(owners, found, strict=True):
            if held_tag:
                tagged.add(line)
            if was_cut:
                cut.add(line)
        self.tagged_lines += len(tagged)
        self.truncated_lines += len(cut)
        return [ids for ids, _, _ in found]

    def _source_ids(
        self, line: str, direction: Direction | None, cut: bool
    ) -> tuple[list[int], bool, bool]:
        """`source_ids` of `line`, whether it held a tag, and whether it was cut."""
        direction = direction or self.default
        text, ids = self._encoded(line)
        kept, room = self._kept(ids, direction)
        if len(kept) > room and not cut:
            whole = len(text) == len(without_direction_passages(line))  # else a start of it
            raise LineTooLong(len(kept) if whole else None, room)
        found = [*direction.source_prefix, *(ids[k] for k in kept[:room])] if kept else []
        return found, len(kept) < len(ids), len(kept) > room

    def source_pieces(self, line: str, direction: Direction | None = None) -> list[str]:
        """The pieces of the subwords `source_ids` gives `line`, after its language tags."""
        text, ids = self._encoded(line)
        pieces = self.src.encode_pieces(text) if ids else []
        kept, room = self._kept(ids, direction or self.default)
        return [pieces[k] for k in kept[:room]]

    def _encoded(self, line: str) -> tuple[str, list[int]]:
        """(text, its ids): `line` whole, or a start of it that holds more tokens than the
        position table's room (`CHARS_PER_TOKEN`); ("", []) for a blank line. The bidi
        controls of a passage are not read (`writing_systems.without_direction_passages`)."""
        line = without_direction_passages(line)
        if not line.strip():
            return "", []
        size = CHARS_PER_TOKEN * self._room
        while len(line) > size:
            ids = self.src.encode(line[:size])
            if len(ids) - self._typed_tags.count(ids) > self._room + CUT_MARGIN:
                return line[:size], ids
            size *= 4
        return line, self.src.encode(line)

    def _kept(self, ids: list[int], direction: Direction) -> tuple[list[int], int]:
        """The positions of a line's `ids` that are no typed tag (nor the word boundary
        before one: `TypedTags.kept`), and how many of them the position table holds after
        `direction`'s tags."""
        return self._typed_tags.kept(ids), self._room - len(direction.source_prefix)

    def prefix_ids(
        self, text: str, direction: Direction | None = None, line: int | None = None
    ) -> list[int]:
        """The target subword ids a translation is forced to start with: the target tags of
        `direction` (None: the default), then `text`'s, cut so that the prefix and one more
        token fit the position table; a prefix forced on `line` (0-based) is checked instead
        (`constrained.check_prefix`)."""
        direction = direction or self.default
        room = self._room - len(direction.target_prefix)
        ids = self.tgt.encode(text) if text.strip() else []
        if line is not None:
            check_prefix(self.tgt, text, ids, room, self.specials, line)
        return [*direction.target_prefix, *ids[:room]]

    def constraint_ids(
        self, phrases: Sequence[str], prefix_len: int, line: int, tgt_lang: str | None = None
    ) -> list[list[int]]:
        """The target ids of one sentence's constraint `phrases` (`constrained.phrase_ids`),
        its forced prefix `prefix_len` tokens long, of line `line` (0-based, for errors), in a
        translation into `tgt_lang` (None: unknown)."""
        room = self._room - prefix_len
        unspaced = writes_without_spaces(tgt_lang)
        return phrase_ids(self.tgt, phrases, room, self.specials, line, unspaced)

    def check_glossary(self, glossary: Glossary) -> None:
        """Refuse a glossary whose target terms are not all constraints the model can meet,
        naming the term's place (`Term.where`: a file's line, a request's entry), before
        anything is translated: found in a sentence, it would be refused naming that sentence
        instead, and not at all where no sentence held its source.

        Raises:
            TmtError: as `constraint_ids` words it, after the term's place.
        """
        for term in glossary.terms:
            try:
                self.constraint_ids([term.target], 0, 0)
            except ConstraintsError as err:
                raise TmtError(f"{term.where}: {err.reason}") from None
