"""Constrained translation: each sentence's target phrases as ids, the rule that refuses those
that cannot fit, and the beam each sentence is searched with (docs/glossaries.md).

Phrases (a glossary's target terms, `--constraints`, a request's) are encoded with the target
tokenizer one by one, as a word of their own: SentencePiece gives "Haus" its word-start piece
"▁Haus", the piece the word has inside a translation. A phrase in a script written without
spaces (Chinese, Japanese) has no word start inside a sentence ("医者" in "私は医者です" is
"医者", not "▁医者", which decodes with a space before it): into such a language, it is
encoded as it reads after another character of its script (`in_sentence_ids`); into English,
a Japanese name is a word of its own. Beam search then enforces them
(search/constraints.py). What cannot fit is decided here, not left to the search:

- More constraint tokens than the model can decode: a sentence's constraint tokens, its forced
  prefix and an end token must fit the position table. Refused (`ConstraintsError`, naming the
  line): dropping a constraint silently would break the promise that each one is met.
- More constraints than the beam serves well: a sentence with C constraints is searched with a
  beam of at least C + 1 (`constrained_beam_size`), in batches of the sentences that need the
  same beam (`beam_groups`); the others keep the configured beam.
- A phrase with characters the target vocabulary lacks (it encodes to the unknown piece): the
  model could only meet it by writing the unknown piece. Refused, naming the line; so is a
  phrase holding a piece the model never produces (the back-translation tag), and a forced
  prefix of either kind (`unproducible`). A blank line gets no search, so its prefix and
  phrases go unused; they are counted (`unused_forcing`).
"""

from __future__ import annotations

from collections.abc import Sequence

from transformer_mt.data.specials import SpecialTokens
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import TmtError
from transformer_mt.search import constrained_beam_size
from transformer_mt.writing_systems import starts_unspaced


class ConstraintsError(TmtError):
    """The constraints of one line (target phrases, or its forced prefix: `field` "prefix")
    cannot be met. Carries the line (0-based, among the lines given) and the reason, so that a
    caller that translates a file in chunks names the line in its own numbering (`shifted`)."""

    def __init__(self, line: int, reason: str, field: str | None = None):
        self.line, self.reason, self.field = line, reason, field
        super().__init__(f"line {line + 1}: {reason}")

    def shifted(self, lines: int) -> ConstraintsError:
        """The same error, `lines` lines further down."""
        return ConstraintsError(self.line + lines, self.reason, self.field)


def phrase_ids(
    tokenizer: Tokenizer,
    phrases: Sequence[str],
    room: int,
    specials: SpecialTokens,
    line: int,
    unspaced: bool | None = False,
) -> list[list[int]]:
    """The target ids of a sentence's `phrases`, each once (blank phrases dropped).

    Args:
        room: the most constraint tokens the sentence can hold: the position table less its
            forced prefix and the end token.
        specials: the model's special ids (its unknown piece, the ids it never produces).
        line: the sentence's line (0-based), for errors.
        unspaced: the target language is written without spaces (`in_sentence_ids`); None:
            unknown, each phrase's own script tells.

    Raises:
        ConstraintsError: a phrase of no pieces (invisible characters) or one the model cannot
            produce (`unproducible`), or more tokens than `room`.
    """
    distinct: list[list[int]] = []
    for phrase in phrases:
        if not phrase.strip():
            continue
        ids = tokenizer.encode(phrase) if unspaced is False else in_sentence_ids(tokenizer, phrase)
        if not ids:  # invisible or control characters alone: it would be met before it starts
            raise ConstraintsError(
                line, f"target phrase {phrase!r} has no pieces once normalised (nothing visible)"
            )
        fault = unproducible(tokenizer, ids, specials)
        if fault is not None:
            raise ConstraintsError(line, f"target phrase {phrase!r} {fault}")
        if ids not in distinct:
            distinct.append(ids)
    tokens = sum(map(len, distinct))
    if tokens > room:
        raise ConstraintsError(
            line,
            f"its constraints take {tokens} target tokens; with its forced prefix and the end "
            f"token the model has room for {room}",
        )
    return distinct


# What a phrase in a script written without spaces is encoded after, to take off again: a
# character of those scripts that ends a sentence, so that it rarely merges with what follows.
AFTER = "。"


def in_sentence_ids(tokenizer: Tokenizer, phrase: str) -> list[int]:
    """The target ids of `phrase` as it reads inside a translation into a language written
    without spaces: for a phrase in such a script, its pieces after `AFTER` (without the
    word-start mark a text's first piece has); otherwise, or where `AFTER`'s pieces merge with
    the phrase's, as a word of its own (`tokenizer.encode`)."""
    ids = tokenizer.encode(phrase)
    if not ids or not starts_unspaced(phrase):
        return ids
    before, after = tokenizer.encode(AFTER), tokenizer.encode(AFTER + phrase)
    if after[: len(before)] != before or len(after) == len(before):
        return ids
    return after[len(before) :]


def unproducible(tokenizer: Tokenizer, ids: Sequence[int], specials: SpecialTokens) -> str | None:
    """Why a target text the search is made to produce, as `ids`, cannot be: characters the
    target vocabulary lacks (it encodes to the unknown piece), or a piece the model never
    produces (the back-translation tag); None when it can."""
    if specials.unk in ids:
        return "has characters the target vocabulary lacks"
    never = [tokenizer.id_to_piece(i) for i in dict.fromkeys(ids) if i in specials.never]
    if never:
        return f"holds {', '.join(map(repr, never))}, a piece the model never produces"
    return None


def check_prefix(
    tokenizer: Tokenizer,
    text: str,
    ids: Sequence[int],
    room: int,
    specials: SpecialTokens,
    line: int,
) -> None:
    """Refuse the forced prefix `text` (target `ids`) of line `line` (0-based) that the model
    cannot produce (`unproducible`) or that takes more than `room` tokens: cut, the
    translation would not start with it.

    Raises:
        ConstraintsError: naming the line, field "prefix".
    """
    fault = unproducible(tokenizer, ids, specials)
    if fault is not None:
        raise ConstraintsError(line, f"its forced prefix {text!r} {fault}", "prefix")
    if len(ids) > room:
        reason = f"its forced prefix takes {len(ids)} target tokens; the model has room for"
        raise ConstraintsError(line, f"{reason} {room}", "prefix")


def unused_forcing(
    prefixes: Sequence[str], phrases: Sequence[Sequence[str]] | None, blank: Sequence[int]
) -> int:
    """How many of the `blank` sentences were given a forced prefix or target phrases, which
    go unused: a blank line translates to a blank one, without a search (a prefix file made
    for every line of a text with blank lines between paragraphs is common, so they are
    counted for a warning, not refused)."""
    return sum(
        bool(prefixes[i].strip())
        or (phrases is not None and any(phrase.strip() for phrase in phrases[i]))
        for i in blank
    )


def beam_groups(
    constraints: Sequence[Sequence[Sequence[int]]], beam_size: int
) -> list[tuple[int, list[int]]]:
    """(beam size, the indices of the sentences searched with it) for sentences with
    `constraints` (phrases of ids each), by `constrained_beam_size`; the configured
    `beam_size` first."""
    groups: dict[int, list[int]] = {}
    for i, phrases in enumerate(constraints):
        groups.setdefault(constrained_beam_size(beam_size, len(phrases)), []).append(i)
    return sorted(groups.items())
