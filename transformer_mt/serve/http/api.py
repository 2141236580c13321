"""The translate request body: raw bytes in, checked texts, prefixes, languages and decode
settings out.

Bodies are parsed here rather than by FastAPI's models so that every way a body can be wrong
(not UTF-8, not JSON, a typo in a key, `true` for an integer, a beam size the decode config
refuses, too many texts) gets one `ApiError` (body.py) naming the field, and the decode settings are
checked by the same `DecodeConfig.validate` as a config file. The body's keys (`KEYS`) and
their meaning: schema.TranslateBody, which documents them for OpenAPI, and docs/serving.md.

This module has no web framework in it: app.py turns an `ApiError` into its HTTP response.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from transformer_mt import documents
from transformer_mt.config import (
    SAMPLING_FIELDS,
    ConfigError,
    DecodeConfig,
    check_changes_read,
    decode_field_types,
)
from transformer_mt.errors import (
    SettingError,
    TmtError,
    one_line,
    printable,
    shown_value,
)
from transformer_mt.inference.languages import Languages, Pair
from transformer_mt.inference.requests import Texts, TextsCountError
from transformer_mt.langid import Detection
from transformer_mt.serve.contract import (
    QueueFull,
    RequestLimits,
    RequestTooLarge,
    ShuttingDown,
    TextRefused,
)
from transformer_mt.serve.http.body import (
    ApiError,
    json_kind,
    json_object,
    number,
    strings,
)
from transformer_mt.serve.http.terms import (
    TermsError,
    ignore_case_flag,
    request_constraints,
    request_glossaries,
)

if TYPE_CHECKING:  # torch would come with it; a Translation is only read here
    from transformer_mt.inference.glossary import Glossary

# DecodeConfig fields a request may not set, and why (a body naming one is refused with the
# reason). `sampling` is a key, so that `"sampling": true` is refused by the engine, which
# only searches; the settings of sampling alone would change nothing and are refused here.
UNSERVED_DECODE = {
    "max_tokens": "the server sizes its batches itself (tmt serve --max-batch-tokens)",
    **{
        name: "a sampling setting, and the server searches (greedy or beam)"
        for name in SAMPLING_FIELDS
    },
}
# Decode settings a request may change: every other DecodeConfig field, with the JSON type
# each takes, DecodeConfig's type of the field (a float field takes an integer too; a
# boolean is never a number, although Python's bool is an int; a Literal takes its strings).
DECODE_FIELDS: dict[str, type] = decode_field_types(
    f.name for f in dataclasses.fields(DecodeConfig) if f.name not in UNSERVED_DECODE
)
TERMS_KEYS = ("glossary", "glossary_ignore_case", "constraints")  # terms.py
KEYS = ("text", "prefix", "source", "target", "format", *DECODE_FIELDS, "report", *TERMS_KEYS)
# The body's `format`: plain text, or a document whose markup is kept (markup.py).
TEXT = "text"
FORMATS = (TEXT, *documents.FORMATS)
# The body's `source` that asks the server to identify each text's language (detection.py).
AUTO = "auto"
# The body keys that name the languages a library call names src_lang and tgt_lang.
LANGUAGE_FIELDS = {"src_lang": "source", "tgt_lang": "target"}
# The longest language code a body may give (NLLB's are 8 characters: deu_Latn).
MAX_CODE_CHARS = 32
# Retry-After of a server that is shutting down: time for a restart, or for a load balancer to
# move the client to another replica.
RETRY_AFTER_SHUTDOWN_SECONDS = 5.0
# Room for JSON syntax and whitespace around the texts in `max_body_bytes`.
BODY_SLACK_BYTES = 64 * 1024


@dataclass(frozen=True)
class TranslateRequest:
    """A checked request: `options` its texts with their per-text prefixes, constraints and
    glossaries (`Texts`; directions are the request's `source` and `target`, filled in at
    submission by `submitted`); `decode_keys` are the decode settings the body set (the
    others are the engine's defaults); `source` and `target` the languages, the engine's
    default direction filling what the body left out, `source` AUTO until `detected` (one
    `Detection` per text, detection.py) is filled in; `format` one of FORMATS: TEXT, or each
    text a document of that format (markup.py); `report`: check the translations for dropped
    content (`Engine.check`)."""

    options: Texts
    decode: DecodeConfig
    decode_keys: tuple[str, ...] = ()
    source: str | None = None
    target: str | None = None
    detected: list[Detection] | None = None
    format: str = TEXT
    report: bool = False

    @property
    def texts(self) -> list[str]:
        """The texts (or documents) to translate."""
        return list(self.options.texts)

    def directions(self) -> list[Pair]:
        """The (source, target) of each text: the detected source with AUTO."""
        if self.detected is not None:
            return [(d.code, self.target) for d in self.detected]
        return [(self.source, self.target)] * len(self.options)

    def submitted(self) -> Texts:
        """What the engine is asked: the texts with their options and directions."""
        return dataclasses.replace(self.options, directions=tuple(self.directions()))


def parse_request(
    body: bytes, defaults: DecodeConfig, limits: RequestLimits, languages: Languages
) -> TranslateRequest:
    """Check a translate request body; `defaults` fill the decode settings it leaves out,
    `languages.default` the languages.

    Raises:
        ApiError: 400 for a malformed body or value, or a direction `languages` lacks; 413 for
            more texts or longer texts than `limits` allow.
    """
    data = json_object(body)
    _check_keys(data)
    if "text" not in data:
        raise ApiError(400, "text", "text: required (a string or a list of strings)")
    texts = strings(data["text"], "text")
    prefixes = None
    if "prefix" in data:
        prefixes = strings(data["prefix"], "prefix")
        if isinstance(data["prefix"], str):
            prefixes = prefixes * len(texts)
    _check_sizes(texts, prefixes, limits)
    source, target = request_languages(data, languages)
    decode_keys = tuple(name for name in DECODE_FIELDS if name in data)
    decode = decode_settings(data, defaults)
    text_format = _format(data, prefixes)
    if text_format != TEXT:  # whatever the checkpoint's default
        decode = dataclasses.replace(decode, n_best=1)
    report = _report(data, text_format)
    constraints, glossaries = _terms(data, len(texts), text_format)
    try:
        options = Texts.of(texts, prefixes=prefixes, constraints=constraints, glossaries=glossaries)
    except TextsCountError as err:
        raise count_error(err) from None
    return TranslateRequest(
        options,
        decode,
        decode_keys,
        source,
        target,
        format=text_format,
        report=report,
    )


def _terms(
    data: dict, n_texts: int, text_format: str
) -> tuple[list[list[str]] | None, list[Glossary | None] | None]:
    """The body's constraints and glossaries, one per text (terms.py; counted by `Texts`);
    constraints for format TEXT only (a document's units are not the request's texts)."""
    try:
        ignore_case = ignore_case_flag(data.get("glossary_ignore_case", False))
        constraints = request_constraints(data.get("constraints", []), n_texts)
        glossaries = request_glossaries(data.get("glossary", []), n_texts, ignore_case)
    except TermsError as err:
        raise ApiError(err.status, err.field, str(err)) from None
    if constraints is not None and any(constraints) and text_format != TEXT:
        field = "constraints"
        raise ApiError(400, field, f"{field}: for format {TEXT} only, not {text_format}")
    return constraints, glossaries


# What each per-text option of `Texts` is called in a request body, and how one is counted.
BODY_FIELDS = {
    "prefixes": ("prefix", "prefixes", "one string for all"),
    "constraints": ("constraints", "lists", "one for all"),
    "glossaries": ("glossary", "lists", "one for all"),
}


def count_error(err: TextsCountError) -> ApiError:
    """The 400 for a per-text field not given once per text, naming the body's field."""
    field, noun, all_ = BODY_FIELDS[err.field]
    return ApiError(
        400,
        field,
        f"{field}: {err.given} {noun} for {err.n_texts} texts; give one per text, or {all_}",
    )


def _report(data: dict, text_format: str) -> bool:
    """The body's `report` (default false); a document is not checked (its units go another
    way, markup.py): refused with a format other than TEXT."""
    value = data.get("report", False)
    if not isinstance(value, bool):
        raise ApiError(400, "report", f"report: expected true or false, got {json_kind(value)}")
    if value and text_format != TEXT:
        raise ApiError(400, "report", f"report: for format {TEXT} only, not {text_format}")
    return value


def _format(data: dict, prefixes: list[str] | None) -> str:
    """The body's `format` (default TEXT). A document is translated unit by unit, so it has
    no prefix and one hypothesis: `prefix` and `n_best` > 1 are refused with it."""
    value = data.get("format", TEXT)
    choices = ", ".join(FORMATS)
    if not isinstance(value, str):
        raise ApiError(400, "format", f"format: expected one of {choices}, got {json_kind(value)}")
    if value not in FORMATS:
        shown = printable(value, MAX_CODE_CHARS)
        raise ApiError(400, "format", f"format={shown}: choose one of {choices}")
    if value != TEXT and prefixes is not None:
        raise ApiError(400, "prefix", f"prefix: for format {TEXT} only, not {value}")
    if value != TEXT and data.get("n_best", 1) > 1:
        raise ApiError(400, "n_best", f"n_best: a {value} document has one translation")
    return value


def request_languages(data: dict, languages: Languages) -> Pair:
    """The body's `source` (a code or AUTO) and `target`: the target defaults to the one of
    `languages.default`, the source to `Languages.source_into` the target (as `tmt translate
    --tgt-lang` fills it in); a direction `languages` does not offer is refused, naming the
    field (with AUTO: a target nothing is translated into)."""
    source = _code(data, "source")
    target = _code(data, "target") or languages.default[1]
    if source != AUTO:
        try:
            source = source or languages.source_into(target)
            languages.check(source, target)
        except SettingError as err:
            raise language_error(err) from None
    elif not languages.sources(target):
        targets = ", ".join(sorted({t for _, t in languages.directions if t is not None}))
        raise ApiError(400, "target", f"target={target}: the model translates into {targets}")
    return source, target


def language_error(err: SettingError) -> ApiError:
    """The 400 for a language refused by `Languages.check`, naming the body's field."""
    field = LANGUAGE_FIELDS[err.setting]
    shown = field if err.value is None else f"{field}={err.value}"
    return ApiError(400, field, f"{shown}: {err.reason}")


def decode_settings(data: dict, defaults: DecodeConfig) -> DecodeConfig:
    """`defaults` with the decode fields `data` sets, checked by `DecodeConfig.validate` and
    for a change the others leave unread (`check_changes_read`), as `tmt translate` checks."""
    changes = {
        name: _decode_value(data[name], name, kind)
        for name, kind in DECODE_FIELDS.items()
        if name in data
    }
    decode = dataclasses.replace(defaults, **changes)
    try:
        decode.validate()
        if not decode.sampling:  # refused by the engine, which only searches, by its own name
            check_changes_read(decode, defaults)
    except ConfigError as err:
        raise setting_error(err, list(changes)) from None
    return decode


def setting_error(err: TmtError, given: list[str]) -> ApiError:
    """A 400 for a decode value refused by the config check or the engine.

    A `ConfigError` carries the `decode.X` keys it blames; the field is the first X the
    request set (a rule may name a setting the request left at its default, as `n_best <=
    beam_size` does).
    """
    if isinstance(err, SettingError) and err.setting in LANGUAGE_FIELDS:
        return language_error(err)
    if isinstance(err, SettingError):
        if isinstance(err.value, bool):  # as the request's JSON spells it, not Python's True
            return ApiError(
                400, err.setting, f"{err.setting}={str(err.value).lower()}: {err.reason}"
            )
        return ApiError(400, err.setting, str(err))
    message = str(err)
    keys = err.keys if isinstance(err, ConfigError) else ()
    named = [key.removeprefix("decode.") for key in keys]
    field = next((name for name in named if name in given), named[0] if named else None)
    return ApiError(400, field, message.replace("decode.", ""))


def engine_error(err: BaseException, given: list[str]) -> ApiError:
    """The refusal for an exception of `engine.submit` or of a job's future; `given`: the
    decode fields the request set. An exception that is not a `TmtError` is the server's
    fault (500)."""
    if isinstance(err, ApiError):
        return err
    if isinstance(err, QueueFull):
        return ApiError(429, None, str(err), retry_after=err.retry_after)
    if isinstance(err, RequestTooLarge):
        return ApiError(413, "text", str(err))
    if isinstance(err, ShuttingDown):
        return ApiError(503, None, str(err), retry_after=RETRY_AFTER_SHUTDOWN_SECONDS)
    if isinstance(err, TextsCountError):
        return count_error(err)
    if isinstance(err, TextRefused):
        return ApiError(400, err.field, str(err))
    if isinstance(err, (ConfigError, SettingError)):
        return setting_error(err, given)
    if isinstance(err, TmtError):
        return ApiError(400, None, str(err))
    return ApiError(500, None, f"internal error: {type(err).__name__}: {one_line(err)}")


def max_body_bytes(limits: RequestLimits) -> int:
    """The largest body a request within `limits` can need: each text and prefix character
    may take 12 bytes as a JSON escape (a surrogate pair)."""
    return 2 * 12 * limits.max_sentence_chars * limits.max_request_sentences + BODY_SLACK_BYTES


def _check_keys(data: dict) -> None:
    for key in data:
        if key in UNSERVED_DECODE:
            raise ApiError(400, key, f"{key}: not taken by the server: {UNSERVED_DECODE[key]}")
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(KEYS)}"
            shown = shown_value(key)  # a lone surrogate or a control character, escaped
            raise ApiError(400, shown, f"{shown}: unknown key ({hint})")


def _code(data: dict, field: str) -> str | None:
    """The language code the body gives as `field`, None when it gives none."""
    if field not in data:
        return None
    value = data[field]
    if not isinstance(value, str) or not value:
        shown = "an empty string" if value == "" else json_kind(value)
        raise ApiError(400, field, f"{field}: expected a language code such as 'de', got {shown}")
    if len(value) > MAX_CODE_CHARS or not value.isprintable():
        raise ApiError(
            400,
            field,
            f"{field}={printable(value, MAX_CODE_CHARS)}: not a language code (at most "
            f"{MAX_CODE_CHARS} printable characters)",
        )
    return value


def _decode_value(value: object, field: str, kind: Any) -> object:
    """`value` of decode field `field` checked against its DecodeConfig type `kind`."""
    if kind is bool:
        if not isinstance(value, bool):
            raise ApiError(400, field, f"{field}: expected true or false, got {json_kind(value)}")
        return value
    if typing.get_origin(kind) is typing.Literal:
        choices = typing.get_args(kind)
        if not isinstance(value, str) or value not in choices:
            shown = repr(value) if isinstance(value, str) else json_kind(value)
            raise ApiError(
                400, field, f"{field}: expected one of {', '.join(choices)}, got {shown}"
            )
        return value
    return number(value, field, kind)


def _check_sizes(texts: list[str], prefixes: list[str] | None, limits: RequestLimits) -> None:
    most = limits.max_request_sentences
    if len(texts) > most:
        raise ApiError(413, "text", f"text: {len(texts)} texts; at most {most} per request")
    for field, items in (("text", texts), ("prefix", prefixes or [])):
        for i, item in enumerate(items):
            if len(item) > limits.max_sentence_chars:
                raise ApiError(
                    413,
                    field,
                    f"{field}[{i}]: {len(item)} characters; at most "
                    f"{limits.max_sentence_chars} per text",
                )
