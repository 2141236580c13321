"""Constrained translation: each sentence's target phrases as ids, the rule that refuses those
that cannot fit, and the beam each sentence is searched with (docs/glossaries.md).

Phrases (a glossary's target terms, `--constraints`, a request's) are encoded with the target
tokenizer one by one, as a word of their own: SentencePiece gives "Haus" its word-start piece
"▁Haus", the piece the word has inside a translation. Beam search then enforces them
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
  prefix of either kind (`unproducible`).
"""

from __future__ import annotations

from collections.abc import Sequence

from transformer_mt.data.specials import SpecialTokens
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import TmtError
from transformer_mt.search import constrained_beam_size


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
) -> list[list[int]]:
    """The target ids of a sentence's `phrases`, each once (blank phrases dropped).

    Args:
        room: the most constraint tokens the sentence can hold: the position table less its
            forced prefix and the end token.
        specials: the model's special ids (its unknown piece, the ids it never produces).
        line: the sentence's line (0-based), for errors.

    Raises:
        ConstraintsError: a phrase the model cannot produce (`unproducible`), or more tokens
            than `room`.
    """
    distinct: list[list[int]] = []
    for phrase in phrases:
        if not phrase.strip():
            continue
        ids = tokenizer.encode(phrase)
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
