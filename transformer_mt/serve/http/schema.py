"""The request and response bodies of the HTTP API as pydantic models, for /docs and /openapi.json.

The app never validates with these (api.py and libretranslate.py parse request bytes
themselves, for their own errors); they describe the same bodies to OpenAPI clients, and
tests keep `TranslateBody`'s fields equal to the keys api.py accepts, and
`LibreTranslateBody`'s to the fields libretranslate.py reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_DEFAULT = "Default: the checkpoint's decode setting."


def request_schema(model: type[BaseModel]) -> dict:
    """The JSON schema of a request body `model`, whole, for an endpoint's OpenAPI
    `requestBody`: pydantic names the models it nests under `$defs`, which an OpenAPI
    document does not resolve there (ReDoc stops with "Invalid reference token: $defs"), so
    each reference is replaced by the schema it names."""
    found = model.model_json_schema()
    defined = found.pop("$defs", {})

    def inline(value: Any) -> Any:
        if isinstance(value, dict):
            ref = value.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defined[ref.removeprefix("#/$defs/")])
            return {key: inline(item) for key, item in value.items()}
        if isinstance(value, list):
            return [inline(item) for item in value]
        return value

    return inline(found)


class GlossaryEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="A source term, a word or a short phrase.")
    target: str = Field(description="Its translation (equal to source: do not translate).")


class TranslateBody(BaseModel):
    """POST /v1/translate and /v1/translate/stream."""

    model_config = ConfigDict(extra="forbid")

    text: str | list[str] = Field(
        description="One text, or a non-empty list of texts. The response always holds a "
        "list of translations, one per text in input order (one for a single string).",
        examples=["Ein Mann fährt Fahrrad.", ["Zwei Hunde spielen.", "Ein Kind lacht."]],
    )
    prefix: str | list[str] | None = Field(
        None,
        description="Target-side text each translation must start with: one string for "
        "every text, or a list with one prefix per text.",
    )
    source: str | None = Field(
        None,
        description='The language of every text, a code of GET /v1/languages, or "auto": '
        "identify each text's language among those the model translates into the target "
        "from. Default: the server's default source. A language tag typed in a text never "
        "changes it: it is taken out.",
        examples=["de", "auto"],
    )
    target: str | None = Field(
        None,
        description="The language to translate into, a code of GET /v1/languages. Default: "
        "the server's default target.",
        examples=["en"],
    )
    format: Literal["text", "html", "markdown"] = Field(
        "text",
        description='"text", or each text a document whose text is translated and whose '
        'markup is kept: "html" (a page or a fragment) or "markdown", as `tmt translate '
        "--format` does. A document has one translation, no score, no prefix and no token "
        "events.",
    )
    beam_size: int | None = Field(None, ge=1, description=f"1: greedy. {_DEFAULT}")
    length_penalty: float | None = Field(
        None, description=f"The exponent of length_norm gnmt and power. {_DEFAULT}"
    )
    length_norm: Literal["gnmt", "average", "none", "power"] | None = Field(
        None,
        description="How a hypothesis' log-probability is divided by its length n: "
        f'"gnmt" ((5 + n) / 6) ** length_penalty, "average" (n), "none", "power" '
        f"(n ** length_penalty). {_DEFAULT}",
    )
    max_len_a: float | None = Field(
        None,
        ge=0,
        description=f"Output length <= max_len_a * source length + max_len_b. {_DEFAULT}",
    )
    max_len_b: int | None = Field(None, ge=0, description=_DEFAULT)
    early_stopping: Literal["k_finished", "heuristic", "never"] | None = Field(
        None,
        description='When a beam stops: "k_finished" once beam_size hypotheses have '
        'finished; "heuristic" and "never" as transformers\' early_stopping false and '
        f'"never". {_DEFAULT}',
    )
    min_len: int | None = Field(
        None, ge=0, description=f"Tokens before end-of-sentence may be chosen. {_DEFAULT}"
    )
    no_repeat_ngram_size: int | None = Field(
        None,
        ge=0,
        description="No translation holds the same n tokens twice (0: off), as transformers' "
        f"and CTranslate2's no_repeat_ngram_size. {_DEFAULT}",
    )
    disable_unk: bool | None = Field(
        None, description=f"Never produce the unknown piece (shown as ⁇). {_DEFAULT}"
    )
    replace_unk: bool | None = Field(
        None,
        description="Write each unknown piece as the source's unknown piece it attends to most "
        f"(any source piece where there is none). {_DEFAULT}",
    )
    n_best: int | None = Field(
        None, ge=1, description=f"Hypotheses per text, <= beam_size. {_DEFAULT}"
    )
    sampling: bool | None = Field(
        None,
        description="Refused when true: the server searches (greedy or beam) and does not "
        "sample; `top_k`, `top_p`, `temperature` and `seed` are refused for the same reason.",
    )
    report: bool = Field(
        False,
        description="Check each sentence's translation for dropped content (coverage of "
        "the source by cross-attention, length ratio, a copy of the source, an empty "
        "output) and return each text's `checks` (docs/checks.md); the translations are "
        "the same. Format text only.",
    )
    glossary: list[GlossaryEntry] | list[list[GlossaryEntry] | None] | None = Field(
        None,
        description="Terms the translations must use: a list of {source, target} entries for "
        "every text, or one such list (or null) per text. The target terms of the source "
        "terms each sentence holds (at word boundaries, the longest first) are that "
        "sentence's constraints, as with `tmt translate --glossary`; a target equal to its "
        "source keeps the source as written. Format text only (docs/glossaries.md).",
        examples=[[{"source": "Hund", "target": "puppy"}]],
    )
    glossary_ignore_case: bool = Field(
        False, description="Find the glossary's source terms whatever their case."
    )
    constraints: list[str] | list[list[str] | None] | None = Field(
        None,
        description="Target phrases each translation must contain: one list for every "
        "text, or one list (or null) per text. A text with phrases of its own is searched "
        "whole, not sentence by sentence. Format text only.",
        examples=[["a bicycle"]],
    )


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="Search score: length-normalised log-probability.")


class Detected(BaseModel):
    language: str = Field(description="The language the text was translated from.")
    confidence: float = Field(
        description="The identifier's confidence, 0 to 1 among the candidate languages; 0: "
        "it could not tell (no letters), and the server's default source was taken (or, "
        "when that is not translated into the target, the first candidate)."
    )


class CheckScores(BaseModel):
    coverage: float = Field(description="Share of source subwords a target word aligns to.")
    length_ratio: float = Field(description="Target subwords / source subwords.")
    source_chrf: float = Field(description="chrF (0-100) of the translation against its source.")


class SentenceCheck(BaseModel):
    source: str = Field(description="The sentence checked.")
    flags: list[Literal["empty", "copy", "length", "coverage"]] = Field(
        description="What fired; empty: the translation passed."
    )
    scores: CheckScores
    retried: bool = Field(
        description="Flagged and translated again cut at its sentence ends: never here, as "
        "the server translates sentence by sentence (tmt translate --no-split --report does)."
    )
    cleared: bool | None = Field(
        description="Whether each sentence of the retry passes the check; null: no retry."
    )


class TranslationItem(BaseModel):
    text: str = Field(description="The best translation.")
    score: float | None = Field(
        None,
        description="Absent for a document (format html or markdown): its units are "
        "searched apart.",
    )
    nbest: list[Hypothesis] | None = Field(
        None, description="Present only with n_best > 1: the n-best list, best first."
    )
    detected: Detected | None = Field(
        None, description='Present only with source "auto": the language identified.'
    )
    checks: list[SentenceCheck] | None = Field(
        None,
        description="Present only with report: the dropped-content check of each of the "
        "text's sentences, in order (none for a blank text).",
    )


class Timing(BaseModel):
    queue_ms: float | None = Field(
        None, description="From arrival to the engine's admission of the first sentence."
    )
    total_ms: float = Field(description="From arrival of the request to its result.")


class TranslateResponse(BaseModel):
    translations: list[TranslationItem]
    timing: Timing


class ErrorDetail(BaseModel):
    status: int
    field: str | None = Field(description="The request body key at fault, or null.")
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class Direction(BaseModel):
    source: str | None
    target: str | None


class LanguagesResponse(BaseModel):
    """GET /v1/languages."""

    default: Direction = Field(description="The direction of a request that names none.")
    languages: list[str] = Field(description="Every language code a request may name.")
    trained: list[Direction] = Field(description="The directions the model was trained on.")
    zero_shot: list[Direction] = Field(
        description="Every other ordered pair of its languages the model can be asked for "
        "(language tags say the direction), never trained on: expect lower quality and "
        "output in the wrong language."
    )
    auto: bool = Field(description='Whether source "auto" can identify languages here.')


class Health(BaseModel):
    status: str = Field(examples=["ok", "shutting down"])


class LibreTranslateBody(BaseModel):
    """POST /translate, LibreTranslate's API: a JSON object, or the same fields as a form."""

    model_config = ConfigDict(extra="allow")  # LibreTranslate ignores fields it does not know

    q: str | list[str] = Field(
        description="One text, or a list of texts (in a form: the field repeated). The "
        "answer's fields are lists, one item per text, when q is a list.",
        examples=["Ein Mann fährt Fahrrad."],
    )
    source: str = Field(
        description='The texts\' language, a code of GET /languages, or "auto".',
        examples=["de", "auto"],
    )
    target: str = Field(description="The language to translate into.", examples=["en"])
    format: str = Field(
        "text", description='"text", or "html": each text a document whose markup is kept.'
    )
    alternatives: int = Field(
        0,
        ge=0,
        description="Other hypotheses of the beam to return: at most its size less one "
        "(none for html).",
    )
    api_key: str | None = Field(
        None,
        description="Where the server requires keys (also: Authorization: Bearer). Every "
        "field may come in the query string instead; the body's wins.",
    )
    glossary: list[GlossaryEntry] | str | None = Field(
        None,
        description="Our extension, not LibreTranslate's: {source, target} entries whose "
        "target terms must appear where a sentence holds the source term (in a form: the "
        "list as JSON text). Format text only.",
    )


class LibreDetectBody(BaseModel):
    """POST /detect, LibreTranslate's API."""

    model_config = ConfigDict(extra="allow")

    q: str | list[str] = Field(examples=["Deux jeunes enfants jouent dans la neige."])
    api_key: str | None = Field(
        None, description="Where the server requires keys; in the query string too."
    )


class LibreDetected(BaseModel):
    confidence: float = Field(description="0 to 100.")
    language: str


class LibreTranslateResponse(BaseModel):
    # LibreTranslate's field names, camel case and all.
    translatedText: str | list[str]
    detectedLanguage: LibreDetected | list[LibreDetected] | None = Field(
        None, description='Present only with source "auto".'
    )
    alternatives: list[str] | list[list[str]] | None = Field(
        None, description="Present only with alternatives > 0."
    )


class LibreLanguage(BaseModel):
    code: str
    name: str = Field(description="English name (the code where lingua knows none).")
    targets: list[str]


class LibreErrorBody(BaseModel):
    error: str
