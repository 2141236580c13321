"""What the /v1 API answers: the JSON of translations, of translated documents and of the
languages a model offers (the request side, parsing and refusals, is api.py's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformer_mt.inference.languages import Languages, Pair
from transformer_mt.langid import Detection, installed

if TYPE_CHECKING:  # torch would come with them; they are only read here
    from transformer_mt.inference.checked import CheckedLine
    from transformer_mt.inference.translator import Translation


def translations_json(
    translations: list[Translation],
    n_best: int,
    detected: list[Detection] | None = None,
    checks: list[CheckedLine] | None = None,
) -> list[dict]:
    """The response's "translations": best text and score, with n_best > 1 the n-best list
    ("nbest": [{"text", "score"}, ...], best first), with `detected` (source AUTO) the
    language each text was translated from ("detected": {"language", "confidence"}), and
    with `checks` (report) its sentences' dropped-content reports ("checks": [{"source",
    "flags", "scores", "retried", "cleared"}, ...], `SentenceReport.to_json`)."""
    found = []
    for i, translation in enumerate(translations):
        item = {"text": translation.texts[0], "score": translation.scores[0]}
        if n_best > 1:
            item["nbest"] = [
                {"text": text, "score": score}
                for text, score in zip(translation.texts, translation.scores, strict=True)
            ]
        if detected is not None:
            item["detected"] = {"language": detected[i].code, "confidence": detected[i].confidence}
        if checks is not None:
            item["checks"] = [sentence.to_json() for sentence in checks[i].sentences]
        found.append(item)
    return found


def documents_json(documents: list[str], detected: list[Detection] | None = None) -> list[dict]:
    """The response's "translations" for documents (format html or markdown): each
    document's translation as "text", without a score (its units are searched apart), and
    with `detected` the language identified from its text ("detected")."""
    found = []
    for i, document in enumerate(documents):
        item: dict[str, object] = {"text": document}
        if detected is not None:
            item["detected"] = {"language": detected[i].code, "confidence": detected[i].confidence}
        found.append(item)
    return found


def languages_json(languages: Languages) -> dict:
    """The GET /v1/languages body: {"default": {"source", "target"}, "languages": [codes],
    "trained": [{"source", "target"}, ...], "zero_shot": [...], "auto": whether `source:
    "auto"` can identify languages (lingua is installed)}."""

    def direction(pair: Pair) -> dict:
        return {"source": pair[0], "target": pair[1]}

    return {
        "default": direction(languages.default),
        "languages": list(languages.codes),
        "trained": [direction(pair) for pair in languages.trained],
        "zero_shot": [direction(pair) for pair in languages.zero_shot],
        "auto": installed(),
    }
