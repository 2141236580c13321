"""Which language a text is in, among a model's languages: offline, with lingua.

`LanguageIdentifier(codes)` wraps lingua-language-detector (its models ship in its wheel),
built for the given languages only: restricted to a model's four Multi30k languages it labelled
8,055 of 8,056 captions right, all 259 short ones included, where lingua over all 75 of its
languages, langid.py and langdetect did worse on short lines (docs/results.md, "Offline language
identification"; scripts/bench_langid.py). The server's `source: "auto"` and the off-target
rate of evaluation both ask it.

Codes are a model's own: ISO 639-1 (`de`), ISO 639-3 (`deu`, the tags of multilingual OPUS-MT
models) or NLLB's `deu_Latn` (639-3 and a script, which lingua does not need). A detection
answers in the code it was given.

lingua is an optional dependency (the `langid` extra), imported only when an identifier is
built.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from transformer_mt.errors import TmtError

INSTALL = "pip install 'transformer_mt[langid]'"

# ISO 639-3 codes of individual languages that NLLB uses where lingua knows the language by its
# macrolanguage's code: without them an NLLB model's Arabic, Persian or Malay would be unknown.
MACROLANGUAGES = {
    "arb": "ara",  # Modern Standard Arabic
    "pes": "fas",  # Western Persian
    "zsm": "msa",  # Standard Malay
    "lvs": "lav",  # Standard Latvian
    "ekk": "est",  # Standard Estonian
    "khk": "mon",  # Halh Mongolian
    "azj": "aze",  # North Azerbaijani
    "als": "sqi",  # Tosk Albanian
    "swh": "swa",  # Swahili (individual language)
    "cmn": "zho",  # Mandarin Chinese
}


class LinguaMissing(TmtError):
    """lingua-language-detector is not installed (the `langid` extra)."""


class UnknownLanguage(TmtError):
    """A language code lingua has no model for; `code` is the code as given."""

    def __init__(self, code: str):
        super().__init__(
            f"language identification: lingua knows no language {code!r} (codes: ISO 639-1 "
            "'de', ISO 639-3 'deu', or NLLB's 'deu_Latn')"
        )
        self.code = code


@dataclass(frozen=True)
class Detection:
    """The most likely language of one text."""

    code: str | None  # one of the identifier's codes; None: no letters lingua could read
    confidence: float  # lingua's confidence value for it, 0 to 1 (they sum to 1 over the codes)


def installed() -> bool:
    """Whether lingua can be imported, without importing it."""
    return importlib.util.find_spec("lingua") is not None


def known(codes: Sequence[str]) -> tuple[str, ...]:
    """The `codes` that lingua has a model for, in their order.

    Raises:
        LinguaMissing: lingua is not installed.
    """
    lingua = _import_lingua()
    return tuple(code for code in codes if _language(lingua, code) is not None)


def language_name(code: str) -> str | None:
    """The English name lingua gives the language of a model's code (`de`, `deu`, `deu_Latn`
    -> "German"), for lists shown to people (LibreTranslate's /languages); None when lingua
    is not installed or has no such language."""
    if not installed():
        return None
    language = _language(_import_lingua(), code)
    return None if language is None else language.name.title()


class LanguageIdentifier:
    """Identifies texts as one of `codes` (at least one; lingua's models of these languages
    only, loaded when it is built: about a second and 150 MiB for four languages).

    Raises:
        LinguaMissing: lingua is not installed.
        UnknownLanguage: a code lingua has no model for.
    """

    def __init__(self, codes: Sequence[str]):
        if not codes:
            raise TmtError("language identification needs at least one language")
        lingua = _import_lingua()
        self.codes = tuple(dict.fromkeys(codes))
        self._code_of: dict[Any, str] = {}
        for code in self.codes:
            language = _language(lingua, code)
            if language is None:
                raise UnknownLanguage(code)
            self._code_of.setdefault(language, code)
        builder = lingua.LanguageDetectorBuilder.from_languages(*self._code_of)
        self._detector = builder.with_preloaded_language_models().build()

    def detect(self, texts: Sequence[str]) -> list[Detection]:
        """The most likely of `codes` for each text, in order.

        One call for all texts: lingua's parallel variant, which on one core runs as fast as
        a loop over the texts (400 Multi30k captions: 27 ms either way) and on more uses them.
        """
        found = []
        for values in self._detector.compute_language_confidence_values_in_parallel(list(texts)):
            best = values[0]  # lingua sorts them, most likely first
            if best.value > 0:
                found.append(Detection(self._code_of[best.language], float(best.value)))
            else:
                found.append(Detection(None, 0.0))
        return found


def _import_lingua() -> Any:
    try:
        import lingua
    except ImportError:
        raise LinguaMissing(
            f"language identification needs lingua-language-detector: {INSTALL}"
        ) from None
    return lingua


def iso_code(code: str) -> str:
    """A model's language code as plain ISO 639 (lowercase, two or three letters): NLLB's
    script dropped (`deu_Latn` -> `deu`), and an individual language NLLB names where others
    name its macrolanguage mapped to that (`arb` -> `ara`, see `MACROLANGUAGES`). Also what
    the sentence splitter's codes are made from (`inference.sentences`)."""
    base = code.split("_")[0].lower()
    return MACROLANGUAGES.get(base, base)


# Codes that name no one language: an imported model's placeholders, a multilingual side.
NO_LANGUAGE = frozenset({"mul", "und", "mis", "zxx", "src", "tgt"})


def primary_code(code: str) -> str:
    """`iso_code` of a code that may also be written with hyphens (BCP 47's `ja-JP`,
    `zh-Hant`, an HTML `lang`): the language, region and script aside."""
    return iso_code(code.strip().replace("-", "_"))


def names_one_language(code: str) -> bool:
    """Whether `code` names one language: not a placeholder (`NO_LANGUAGE`) nor a group
    (OPUS-MT's `ROMANCE`), whose text could be in any of several."""
    base = primary_code(code)
    return base not in NO_LANGUAGE and base.isascii() and base.isalpha() and len(base) <= 3


def _language(lingua: Any, code: str) -> Any | None:
    """lingua's `Language` of a model's code, None when it has none."""
    base = iso_code(code)
    try:
        if len(base) == 2:
            return lingua.Language.from_iso_code_639_1(lingua.IsoCode639_1.from_str(base))
        if len(base) == 3:
            return lingua.Language.from_iso_code_639_3(lingua.IsoCode639_3.from_str(base))
    except ValueError:  # "Matching enum member not found"
        return None
    return None
