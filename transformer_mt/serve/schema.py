"""The request and response bodies of the HTTP API as pydantic models, for /docs and /openapi.json.

The app never validates with these (api.py parses request bytes itself, for its one-field
errors); they describe the same bodies to OpenAPI clients, and a test keeps `TranslateBody`'s
fields equal to the keys api.py accepts.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

_DEFAULT = "Default: the checkpoint's decode setting."


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
    beam_size: int | None = Field(None, ge=1, description=f"1: greedy. {_DEFAULT}")
    length_penalty: float | None = Field(None, description=f"GNMT alpha. {_DEFAULT}")
    max_len_a: float | None = Field(
        None,
        ge=0,
        description=f"Output length <= max_len_a * source length + max_len_b. {_DEFAULT}",
    )
    max_len_b: int | None = Field(None, ge=0, description=_DEFAULT)
    n_best: int | None = Field(
        None, ge=1, description=f"Hypotheses per text, <= beam_size. {_DEFAULT}"
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


class TranslationItem(BaseModel):
    text: str = Field(description="The best translation.")
    score: float
    nbest: list[Hypothesis] | None = Field(
        None, description="Present only with n_best > 1: the n-best list, best first."
    )
    detected: Detected | None = Field(
        None, description='Present only with source "auto": the language identified.'
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
