"""LibreTranslate's API in its own words: its request fields in, checked requests out, and its
response and error bodies. The one owner of LibreTranslate request parsing, as api.py is of
/v1's; libretranslate_routes.py serves it from the same engine, keys and limits.

LibreTranslate (libretranslate/app.py) reads a JSON object when the request says
`application/json`, else the form fields and the query string's. `request_fields` reads the
query string whatever the body is, so that `POST /translate?api_key=KEY` with a JSON body
carries its key as it does with a form, and a field in both places is taken from the body,
whole (one place per field: a form's `q` never gains the query string's texts, a key in
both is not two keys). `application/x-www-form-urlencoded` is what libretranslatepy and
libretranslate-aio send; a field given twice in one place is a list (libretranslate-aio
sends a list of texts as `q` repeated, which LibreTranslate itself would cut to its first
text); multipart/form-data is refused. Fields it does not know are ignored, as
LibreTranslate ignores them.

POST /translate: `q` (a string, or a list of strings), `source` (a code, or "auto": each
text's language identified), `target`, `format` ("text", or "html": each text a document
whose markup is kept, markup.py), `alternatives` (more hypotheses of the beam: at most the
beam size less one; none for a document) and `api_key`; and our own `glossary`, which
LibreTranslate lacks: a list of {"source", "target"} entries for every text (in a form, that
list as JSON text), whose terms each sentence holds are its constraints (terms.py). POST
/detect: `q`, `api_key`; the languages of the model found in `q` (none: an empty list), or,
without lingua, LibreTranslate's error body saying that detection is unavailable.
Codes are matched as given, else ignoring case. Errors are LibreTranslate's: `{"error":
"..."}` with its status codes and, where it has one, its message; a request over a size limit
is its 400, not our 413.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import urllib.parse
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from transformer_mt.config import DecodeConfig
from transformer_mt.errors import SettingError, printable
from transformer_mt.inference.glossary import Glossary
from transformer_mt.inference.languages import Languages
from transformer_mt.inference.requests import Texts, TextsCountError
from transformer_mt.langid import Detection, language_name
from transformer_mt.serve.contract import RequestLimits
from transformer_mt.serve.http.api import AUTO, MAX_CODE_CHARS, TranslateRequest, count_error
from transformer_mt.serve.http.body import ApiError, json_object, json_value
from transformer_mt.serve.http.terms import TermsError, request_glossaries

FORMATS = ("text", "html")
# LibreTranslate answers with 400, 403, 429 and 500 (its clients know no others); our refusals
# of a request too large (413), a body in another charset or compressed (415), a head too large
# (431) or of a language identifier not installed (501) are its 400.
STATUS = {413: 400, 415: 400, 431: 400, 501: 400}
# The addresses of LibreTranslate's API: refusals there are in its error body, by `libre_error`.
PATHS = frozenset({"/translate", "/languages", "/detect"})


class LibreError(ApiError):
    """A refusal in LibreTranslate's error body, {"error": "message"}."""

    def body(self) -> dict:
        return {"error": self.message}


def libre_error(err: ApiError) -> LibreError:
    """`err` (a refusal of any layer) as LibreTranslate answers it."""
    if isinstance(err, LibreError):
        return err
    status = STATUS.get(err.status, err.status)
    return LibreError(status, err.field, err.message, err.retry_after)


@dataclass(frozen=True)
class LibreRequest:
    """A checked POST /translate: the request for the engine, whether `q` was a list (the
    answer's fields are lists then), the alternatives asked for, and the key given."""

    request: TranslateRequest
    batch: bool
    alternatives: int
    api_key: str | None


def request_fields(body: bytes, content_type: str, query: bytes) -> dict[str, object]:
    """The fields of a request: the query string's, and the body's (a JSON object, or a form),
    a field in both taken from the body. In a query string or a form a field given more
    than once is a list of its values.

    Raises:
        LibreError: 400 for a body that is not a JSON object, a form or query string that is
            not UTF-8, or multipart/form-data.
    """
    fields = _form_fields(query, "the query string")
    fields.update(_body_fields(body, content_type))
    return fields


def _body_fields(body: bytes, content_type: str) -> dict[str, object]:
    """A JSON body's object without its null fields (not given, so that the query string's
    stand; an empty body: no fields), or a form body's fields."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        if not body.strip():
            return {}
        try:
            found = json_object(body)
        except ApiError as err:
            raise LibreError(400, "body", f"Invalid JSON format: {err.message}") from None
        return {name: value for name, value in found.items() if value is not None}
    if media.startswith("multipart/"):
        raise LibreError(
            400,
            "body",
            "Invalid request: multipart bodies are not supported; send JSON or "
            "application/x-www-form-urlencoded",
        )
    if body.lstrip()[:1] == b"{":  # read as a form, it would be one field named by the JSON
        raise LibreError(
            400,
            "body",
            f"Invalid request: the body is JSON but its Content-Type is {media or 'not given'}; "
            "send it as application/json",
        )
    return _form_fields(body, "the form")


def _form_fields(encoded: bytes, what: str) -> dict[str, object]:
    """The fields of a query string or form (`what`, for the message), a field given more
    than once a list of its values."""
    try:
        text = encoded.decode("utf-8")  # percent escapes too, below
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise LibreError(400, "body", f"Invalid request: {what} is not UTF-8") from None
    values: dict[str, list[str]] = defaultdict(list)
    for name, value in pairs:  # appended: linear in the fields, a form of 100,000 q's too
        values[name].append(value)
    return {name: found[0] if len(found) == 1 else found for name, found in values.items()}


def parse_translate(
    fields: dict, defaults: DecodeConfig, limits: RequestLimits, languages: Languages
) -> LibreRequest:
    """Check the fields of POST /translate; `defaults`: the engine's decode settings, whose
    beam the alternatives come from.

    Raises:
        LibreError: 400, with LibreTranslate's message where it has one.
    """
    texts, batch = _texts(fields, limits)
    source = _code(fields, "source", languages, auto=True)
    target = _code(fields, "target", languages)
    _check_direction(source, target, languages)
    text_format = fields.get("format") or "text"
    if text_format not in FORMATS:
        # a list (the field given twice) or an object shown as the client wrote it
        written = text_format if isinstance(text_format, str) else json.dumps(text_format)
        shown = printable(written, MAX_CODE_CHARS)
        raise LibreError(400, "format", f"{shown} format is not supported")
    alternatives = _alternatives(fields.get("alternatives", 0), defaults.beam_size)
    html = text_format == "html"  # a document has no alternatives (as in LibreTranslate)
    decode = dataclasses.replace(defaults, n_best=1 if html else alternatives + 1)
    glossaries = _glossaries(fields.get("glossary"), len(texts))
    try:
        options = Texts.of(texts, glossaries=glossaries)
    except TextsCountError as err:
        refusal = count_error(err)
        raise LibreError(400, refusal.field, f"Invalid request: {refusal.message}") from None
    request = TranslateRequest(options, decode, source=source, target=target, format=text_format)
    return LibreRequest(request, batch, alternatives, _key(fields))


def parse_detect(fields: dict, limits: RequestLimits) -> tuple[list[str], str | None]:
    """The texts and the key of POST /detect.

    Raises:
        LibreError: 400, with LibreTranslate's message where it has one.
    """
    texts, _ = _texts(fields, limits)
    return texts, _key(fields)


def translate_json(
    libre: LibreRequest, detected: list[Detection] | None, hypotheses: list[list[str]]
) -> dict:
    """The POST /translate body from the `hypotheses` of each text (best first; one for an
    HTML document): `translatedText`; with source auto `detectedLanguage` ({"confidence":
    0-100, "language"}); with alternatives asked for `alternatives` (the other hypotheses,
    without repeats, the translation itself or empty ones; none for a document). A list of
    each, one per text, when `q` was a list."""

    def one_or_all(items: list) -> object:
        return items if libre.batch else items[0]

    body: dict[str, object] = {"translatedText": one_or_all([h[0] for h in hypotheses])}
    if detected is not None:
        body["detectedLanguage"] = one_or_all([_detection(d) for d in detected])
    if libre.alternatives > 0:
        others = [list(dict.fromkeys(t for t in h[1:] if t and t != h[0])) for h in hypotheses]
        body["alternatives"] = one_or_all(others)
    return body


def detect_json(detections: Sequence[Detection]) -> list[dict]:
    """The POST /detect body: [{"confidence": 0-100, "language"}], most likely first. For
    several texts, as LibreTranslate: each language found, with its mean confidence over the
    texts found in it. A text in no language of the model (code None) adds nothing: none
    found is an empty list, never a language the texts are not in."""
    by_code: dict[str, list[float]] = defaultdict(list)
    for detection in detections:
        if detection.code is not None:
            by_code[detection.code].append(detection.confidence)
    found = [Detection(code, sum(c) / len(c)) for code, c in by_code.items()]
    return [_detection(d) for d in sorted(found, key=lambda d: -d.confidence)]


def languages_json(languages: Languages) -> list[dict]:
    """The GET /languages body: [{"code", "name", "targets"}] for every language of the
    model, `targets` the languages it may be asked to translate it into (trained and
    zero-shot, as a request may ask for either); `name` lingua's English name, else the
    code."""
    return [
        {
            "code": code,
            "name": language_name(code) or code,
            "targets": sorted({t for s, t in languages.directions if s == code and t}),
        }
        for code in languages.codes
    ]


def _texts(fields: dict, limits: RequestLimits) -> tuple[list[str], bool]:
    """`q` as a list of texts, and whether it was a list."""
    q = fields.get("q")
    if q is None or q == "" or q == []:
        raise LibreError(400, "q", "Invalid request: missing q parameter")
    batch = isinstance(q, list)
    texts = q if batch else [q]
    for text in texts:
        if not isinstance(text, str):
            raise LibreError(
                400, "q", "Invalid request: q parameter must be a string or a list of strings"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise LibreError(400, "q", "Invalid request: q holds a lone surrogate") from None
    _check_size(len(texts), limits.max_request_sentences)
    for text in texts:
        _check_size(len(text), limits.max_sentence_chars)
    return texts, batch


def _check_size(size: int, limit: int) -> None:
    if size > limit:
        raise LibreError(
            400, "q", f"Invalid request: request ({size}) exceeds text limit ({limit})"
        )


def _code(fields: dict, name: str, languages: Languages, auto: bool = False) -> str:
    """The language code of field `name`: as given when the model has it (or it is "auto"
    where allowed), else the model's code that equals it ignoring case, else as given (and
    refused by `_check_direction`)."""
    value = fields.get(name)
    if not value:
        raise LibreError(400, name, f"Invalid request: missing {name} parameter")
    if not isinstance(value, str):
        raise LibreError(400, name, f"Invalid request: {name} parameter must be a string")
    known = (*languages.codes, AUTO) if auto else languages.codes
    if value in known:
        return value
    same = [code for code in known if code.casefold() == value.casefold()]
    return same[0] if len(same) == 1 else value


def _check_direction(source: str, target: str, languages: Languages) -> None:
    if source == AUTO:
        if not languages.sources(target):
            raise LibreError(400, "target", f"{printable(target, MAX_CODE_CHARS)} is not supported")
        return
    try:
        languages.check(source, target)
    except SettingError as err:
        field = "target" if err.setting == "tgt_lang" else "source"
        code = target if field == "target" else source
        if code not in languages.codes:
            shown = printable(code, MAX_CODE_CHARS)
            raise LibreError(400, field, f"{shown} is not supported") from None
        raise LibreError(
            400,
            "target",
            f"{_name(target)} ({target}) is not available as a target language from "
            f"{_name(source)} ({source})",
        ) from None


def _alternatives(value: object, beam_size: int) -> int:
    """LibreTranslate's `alternatives`: a whole number (negative: 0), at most `beam_size` - 1
    (they are the beam's other hypotheses)."""
    number = None
    if isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, (int, str)) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):  # "3.5", "three": not a number
            number = int(value)
    if number is None:
        raise LibreError(
            400, "alternatives", "Invalid request: alternatives parameter is not a number"
        )
    most = beam_size - 1
    if number > most:
        raise LibreError(
            400, "alternatives", f"Invalid request: alternatives parameter must be <= {most}"
        )
    return max(0, number)


def _glossaries(value: object, n_texts: int) -> list[Glossary | None] | None:
    """Our `glossary` field (None: not given), for text and documents alike (a document's
    sentences are searched for its terms); a form's is JSON text."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json_value(value, "glossary")
        except ApiError as err:
            raise LibreError(400, "glossary", f"Invalid request: {err.message}") from None
    try:
        return request_glossaries(value, n_texts)
    except TermsError as err:
        raise LibreError(400, err.field, f"Invalid request: {err}") from None


def _key(fields: dict) -> str | None:
    """The `api_key` field; None when absent or empty (the Authorization header may hold the
    key then).

    Raises:
        LibreError: 400 for a key that is not one string (a number, or given twice).
    """
    key = fields.get("api_key")
    if key is None or key == "":
        return None
    if not isinstance(key, str):
        raise LibreError(400, "api_key", "Invalid request: api_key parameter must be a string")
    return key


def _detection(detection: Detection) -> dict:
    return {"confidence": round(100 * detection.confidence, 2), "language": detection.code}


def _name(code: str) -> str:
    return language_name(code) or code
