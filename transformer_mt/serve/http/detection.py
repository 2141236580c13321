"""`source: "auto"`: each text's language, identified among the languages the model may be
asked to translate into the request's target from (`Languages.sources`); for LibreTranslate's
/detect, among every language the model translates from.

The identifier is `langid.LanguageIdentifier` (lingua, restricted to those languages: the
choice measured best on Multi30k's short captions, docs/results.md). One is built per set of
candidates on the first request that needs it (lingua then loads its models: about a second
for four languages, off the event loop) and kept. A text to translate that lingua cannot place
among the candidates (digits, punctuation, or a language the model lacks: restricted to one
language, lingua answers only whether a text is in it) is translated from the server's
default source when the model translates that into the target, else from the first
candidate, and reported with confidence 0. /detect translates nothing, so it reports no
language for such a text: naming the default source would send a client that routes on the
answer to a model of the wrong language.
"""

from __future__ import annotations

import threading

from transformer_mt import langid
from transformer_mt.inference.languages import Languages
from transformer_mt.langid import Detection, LanguageIdentifier, LinguaMissing
from transformer_mt.serve.http.body import ApiError


class SourceDetector:
    """The identifiers of one server's model, by candidate languages. Thread-safe."""

    def __init__(self, languages: Languages):
        self.languages = languages
        self._identifiers: dict[tuple[str, ...], LanguageIdentifier] = {}
        self._lock = threading.Lock()

    def detect(self, texts: list[str], target: str | None) -> list[Detection]:
        """The source language of each text (a code the model translates into `target`
        from) and lingua's confidence in it; a text lingua cannot place: the fallback
        source with confidence 0.

        Raises:
            ApiError: 501 (field source) without lingua installed; 400 (field source) when
                lingua knows none of the candidate languages.
        """
        sources = self.languages.sources(target)
        what = f"translated into {target}"
        identifier = self._identifier(sources, "source", "source=auto", what, "; name the source")
        default = self.languages.default[0]
        fallback = default if default in sources else identifier.codes[0]
        return [
            found if found.code is not None else Detection(fallback, 0.0)
            for found in identifier.detect(texts)
        ]

    def detect_any(self, texts: list[str]) -> list[Detection]:
        """The language of each text among every language the model translates from
        (LibreTranslate's /detect, which names no target); code None for a text lingua places
        in none of them.

        Raises:
            ApiError: 501 (field q) without lingua installed, 400 (field q) when lingua knows
                none of the model's source languages: detection is unavailable.
        """
        sources = tuple(sorted({s for s, _ in self.languages.directions if s is not None}))
        refusal, what = "language detection is unavailable", "the model translates from"
        return self._identifier(sources, "q", refusal, what).detect(texts)

    def _identifier(
        self, sources: tuple[str, ...], field: str, refusal: str, what: str, hint: str = ""
    ) -> LanguageIdentifier:
        """The identifier among `sources` (the languages `what`), built on first use; when
        there can be none, an ApiError naming `field` whose message starts with `refusal`
        and ends with `hint`."""
        with self._lock:
            found = self._identifiers.get(sources)
            if found is None:
                try:
                    codes = langid.known(sources)
                except LinguaMissing as err:
                    raise ApiError(501, field, f"{refusal}: {err}") from None
                if not codes:
                    raise ApiError(
                        400,
                        field,
                        f"{refusal}: lingua identifies none of the languages {what} "
                        f"({', '.join(sources)}){hint}",
                    )
                found = self._identifiers[sources] = LanguageIdentifier(codes)
            return found
