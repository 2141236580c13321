"""Tags written in a line's text, taken out of its ids: the one rule for training and
translation.

A multilingual tokenizer keeps every `>>xx<<` language tag whole, so a tag written in text (an
OPUS-MT-style corpus tagged in advance, a user typing `>>fra<< ...`) encodes to the very id
that the framing puts in front of a source (`specials.Framing`). Left in, a pre-tagged
training source would carry two tags, a tag in a target would teach the model an id that
search never produces, and a typed tag would switch a translation's language. The language of
a pair comes from its direction alone, so such ids are taken out wherever text is encoded,
with the word boundary "▁" that SentencePiece writes before a tag that follows a word or
starts the line (`Ein >>de<< Mann` is `▁Ein ▁ >>de<< ▁Mann`).

Training takes out language tags only: a tagged training source starts with the
back-translation tag on purpose (`TrainSource.tagged`). Translation takes out a typed `<BT>`
too, which a model trained with tagged back-translation would read as its own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from transformer_mt.data.specials import BACK_TRANSLATION_TAG, SpecialTokens
from transformer_mt.data.tokenizer import Tokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)  # an array field: compared by identity
class TypedTags:
    """The tag ids a tokenizer's text may hold, and its word-boundary id (None: it has none).

    Example:
        tags = TypedTags.of(tokenizer, specials)
        column, taken_out = column.without_tags(tags)  # `encoding.TokenColumn`
        positions = tags.kept(tokenizer.encode(line))
    """

    ids: np.ndarray  # (T,) int64, sorted
    boundary: int | None

    @classmethod
    def of(
        cls,
        tokenizer: Tokenizer,
        specials: SpecialTokens,
        back_translation: bool = False,
        named_by: Tokenizer | None = None,
    ) -> TypedTags:
        """The language tags of `specials` in `tokenizer`'s text, and with `back_translation`
        its back-translation tag where it has one. `named_by`: the tokenizer whose ids
        `specials` holds (the source's), where `tokenizer` is another (a target vocabulary of
        its own): each tag is found there by its piece, and an id of the source's vocabulary
        would be another piece of the target's."""
        ids = set(specials.language_tags.values())
        if named_by is not None:
            ids = {tokenizer.piece_id(named_by.id_to_piece(i)) for i in ids}
        if back_translation:
            ids.add(tokenizer.piece_id(BACK_TRANSLATION_TAG))
        ids.discard(specials.unk)
        boundary = tokenizer.piece_id("\u2581")
        return cls(
            np.array(sorted(ids), dtype=np.int64), None if boundary == specials.unk else boundary
        )

    def dropped(self, values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, int]:
        """A mask over the flat ids `values` of rows split at `offsets` ((N + 1,), as in
        `encoding.TokenColumn`): True for a tag and for a word boundary right before one in
        the same row; and how many tags it holds."""
        tags = np.isin(values, self.ids)
        dropped = tags.copy()
        if self.boundary is not None and len(values):
            before = np.zeros(len(values), dtype=bool)
            before[:-1] = tags[1:]
            ends = np.asarray(offsets[1:], dtype=np.int64) - 1
            before[ends[ends >= 0]] = False  # a row's last id comes before the next row's first
            dropped |= before & (values == self.boundary)
        return dropped, int(np.count_nonzero(tags))

    def kept(self, ids: Sequence[int]) -> list[int]:
        """The positions of one row's `ids` that `dropped` keeps."""
        dropped, _ = self.dropped(np.asarray(ids, dtype=np.int64), np.array([0, len(ids)]))
        return np.flatnonzero(~dropped).tolist()

    def count(self, ids: Sequence[int]) -> int:
        """How many of `ids` are tags."""
        return int(np.count_nonzero(np.isin(np.asarray(ids, dtype=np.int64), self.ids)))


# Nothing taken out: a model without language tags.
NO_TAGS = TypedTags(np.zeros(0, dtype=np.int64), None)


def training_tags(
    tokenizers: tuple[Tokenizer, Tokenizer], specials: SpecialTokens
) -> tuple[TypedTags, TypedTags]:
    """The language tags to take out of training text, on the source and the target side."""
    src, tgt = tokenizers
    return TypedTags.of(src, specials), TypedTags.of(tgt, specials, named_by=src)


def log_taken_out(where: str, count: int) -> None:
    """Warn that `count` (when any) language tags written in the text of `where` were taken
    out: a corpus tagged in advance is tagged again by its direction."""
    if count:
        log.warning(
            "%s: %s language tags written in the text taken out (each pair's direction "
            "gives its tags)",
            *(where, f"{count:,}"),
        )
