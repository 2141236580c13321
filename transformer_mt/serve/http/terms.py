"""The glossaries and constraints of a translate request: the body's `glossary`,
`glossary_ignore_case` and `constraints` (api.py), or LibreTranslate's `glossary`
(libretranslate.py), checked into what the engine takes, one `Glossary` and one list of
target phrases per text (docs/serving.md, docs/glossaries.md).

Both come in two forms, as `prefix` does: one for every text (a list of entries, a list of
phrases), or one per text (a list of such lists, `null` or `[]` for a text without). The
entries are checked by inference/glossary.py, by the rules of a glossary file (an empty term, a
term over `MAX_TERM_CHARS`, a source term given twice with different targets), and each
refusal is one `TermsError` naming the field and the place in the body: `glossary[1][3]` is
the fourth entry of the second text's glossary. The engine matches the glossaries in each
sentence, as `tmt translate --glossary` does, and refuses constraints that cannot fit
(`contract.TextRefused`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from transformer_mt.errors import TmtError
from transformer_mt.inference.glossary import Glossary, checked_phrase, checked_term

# The most glossary entries, and the most constraint phrases, of one request, all its texts
# together: matching costs a few microseconds per sentence and term (0.4 ms for a sentence
# against 5,000 terms), and it runs before the request is queued.
MAX_REQUEST_TERMS = 10_000

T = TypeVar("T")


class TermsError(TmtError):
    """A request's glossary or constraints refused: HTTP `status` (400, or 413 for too many
    terms), the body `field` at fault (the field of `where`, the place the message names)."""

    def __init__(self, where: str, message: str, status: int = 400):
        super().__init__(message)
        self.field, self.status = where.split("[", 1)[0].split(".", 1)[0], status


def request_glossaries(
    value: object, n_texts: int, ignore_case: bool = False
) -> list[Glossary | None] | None:
    """One glossary (or None) per text from the body's `glossary`: a list of {"source",
    "target"} entries for every text (None when it has none), or one such list (or null) per
    text.

    Raises:
        TermsError: naming the entry (see the module).
    """
    field = "glossary"
    per_text = _per_text(value, field, "a list of {source, target} entries")
    if per_text is None:
        glossary = _glossary(value, field, ignore_case)
        return [glossary] * n_texts if glossary.terms else None
    _check_count(sum(map(len, per_text)), field)
    glossaries = [
        _glossary(entries, f"{field}[{i}]", ignore_case) if entries else None
        for i, entries in enumerate(per_text)
    ]
    return glossaries


def request_constraints(value: object, n_texts: int) -> list[list[str]] | None:
    """One list of target phrases per text from the body's `constraints`: a list of phrases for
    every text (None when it has none), or one such list (or null) per text.

    Raises:
        TermsError: naming the phrase (see the module).
    """
    field = "constraints"
    per_text = _per_text(value, field, "a list of target phrases")
    if per_text is None:
        phrases = _phrases(value, field)
        return [phrases] * n_texts if phrases else None
    _check_count(sum(map(len, per_text)), field)
    found = [_phrases(phrases, f"{field}[{i}]") for i, phrases in enumerate(per_text)]
    return found


def ignore_case_flag(value: object) -> bool:
    """The body's `glossary_ignore_case`: find source terms whatever their case."""
    if not isinstance(value, bool):
        field = "glossary_ignore_case"
        raise TermsError(field, f"{field}: expected true or false")
    return value


def _per_text(value: object, field: str, one: str) -> list[list] | None:
    """`value` as one list per text when it is in that form (its items lists or nulls; their
    count is checked with the other per-text options, by `Texts`), None when it is one list
    for every text."""
    if not isinstance(value, list):
        raise TermsError(field, f"{field}: expected {one}, or one such list per text")
    if not value or not (value[0] is None or isinstance(value[0], list)):
        _check_count(len(value), field)
        return None
    for i, item in enumerate(value):
        if not (item is None or isinstance(item, list)):
            raise TermsError(field, f"{field}[{i}]: expected {one} or null")
    return [item or [] for item in value]


def _glossary(entries: list, where: str, ignore_case: bool) -> Glossary:
    terms = _each(entries, where, lambda entry, at: checked_term(*_entry(entry, at), at))
    try:
        return Glossary(terms, ignore_case)
    except TmtError as err:  # a source term given twice with different targets
        raise TermsError(where, str(err)) from None


def _phrases(phrases: list, where: str) -> list[str]:
    return _each(phrases, where, lambda phrase, at: checked_phrase(_text(phrase, at), "phrase", at))


def _each(items: list, where: str, check: Callable[[object, str], T]) -> list[T]:
    """`check(item, its place)` of every item, a `TmtError` as a `TermsError`."""
    checked = []
    for i, item in enumerate(items):
        try:
            checked.append(check(item, f"{where}[{i}]"))
        except TermsError:
            raise
        except TmtError as err:
            raise TermsError(where, str(err)) from None
    return checked


def _entry(entry: object, where: str) -> tuple[str, str]:
    """The source and target of one glossary entry, an object of those two keys."""
    if not isinstance(entry, dict):
        raise TermsError(where, f'{where}: expected an object {{"source": ..., "target": ...}}')
    for key in entry:
        if key not in ("source", "target"):
            raise TermsError(where, f"{where}: unknown key {key!r}; an entry has source and target")
    for key in ("source", "target"):
        if key not in entry:
            raise TermsError(where, f"{where}: {key} missing; an entry has source and target")
    return _text(entry["source"], f"{where}.source"), _text(entry["target"], f"{where}.target")


def _text(value: object, where: str) -> str:
    """A string that can be encoded as UTF-8 (JSON may hold a lone surrogate)."""
    if not isinstance(value, str):
        raise TermsError(where, f"{where}: expected a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise TermsError(where, f"{where}: holds a lone surrogate (\\ud800-\\udfff)") from None
    return value


def _check_count(count: int, field: str) -> None:
    if count > MAX_REQUEST_TERMS:
        raise TermsError(
            field, f"{field}: {count} entries; at most {MAX_REQUEST_TERMS} per request", 413
        )
