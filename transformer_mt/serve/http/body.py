"""A request body as JSON, and `ApiError`: how the server refuses a request.

Every route answers a refusal the same way, {"error": {"status", "field", "message"}}, with a
one-line message naming the field at fault; the body checks here (UTF-8, JSON without NaN, no
key twice, the kinds of values) name JSON's kinds of value ("a boolean (true)", "a list") in
those messages, for the `/v1` API and LibreTranslate's alike.
"""

from __future__ import annotations

import json
import sys

from transformer_mt.errors import VALUE_CHARS, printable


class ApiError(Exception):
    """A request the server refuses: HTTP `status`, the body `field` at fault (None when the
    refusal is not about one field), a one-line `message`, and for a refusal that passes
    (a full queue, a restart) the seconds after which to try again."""

    def __init__(
        self, status: int, field: str | None, message: str, retry_after: float | None = None
    ):
        super().__init__(message)
        self.status, self.field, self.message = status, field, message
        self.retry_after = retry_after

    def body(self) -> dict:
        """The JSON error body: {"error": {"status", "field", "message"}}."""
        return {"error": {"status": self.status, "field": self.field, "message": self.message}}

    def encoded(self) -> bytes:
        """`body()` as the routes' `JSONResponse` writes it (compact, UTF-8), for the answers
        written outside them (the host and origin guard, the connection limits)."""
        return json.dumps(self.body(), ensure_ascii=False, separators=(",", ":")).encode()


def json_object(body: bytes) -> dict:
    """The JSON object of a body; a 400 (field body) for bytes that are not UTF-8, or text
    that `json_value` refuses, or not an object."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ApiError(
            400, "body", f"body: not UTF-8 (byte {body[err.start]:#04x} at offset {err.start})"
        ) from None
    data = json_value(text, "body")
    if not isinstance(data, dict):
        raise ApiError(400, "body", f"body: expected a JSON object, got {json_kind(data)}")
    return data


def json_value(text: str, field: str) -> object:
    """The JSON value of `text` (a body, or JSON text in a form field); a 400 naming `field`
    for text that is not JSON (NaN and Infinity included), a number of more digits than
    Python converts (`sys.get_int_max_str_digits`), nesting too deep for the parser, or an
    object that gives a key twice (which of the two to believe is not ours to choose)."""

    def refuse(reason: str) -> ApiError:
        return ApiError(400, field, f"{field}: not JSON ({reason})")

    def refuse_constant(name: str) -> None:
        raise refuse(f"{name} is not a JSON value")

    def unique(pairs: list[tuple[str, object]]) -> dict:
        found: dict[str, object] = {}
        for key, value in pairs:
            if key in found:
                shown = printable(json.dumps(key), VALUE_CHARS)
                raise ApiError(400, field, f"{field}: the key {shown} is given twice")
            found[key] = value
        return found

    try:
        return json.loads(text, parse_constant=refuse_constant, object_pairs_hook=unique)
    except json.JSONDecodeError as err:
        raise refuse(f"{err.msg} at line {err.lineno} column {err.colno}") from None
    except RecursionError:
        raise refuse("nested too deeply") from None
    except ValueError:  # an integer literal of more digits than int() converts
        raise refuse(f"a number of more than {sys.get_int_max_str_digits()} digits") from None


def strings(value: object, field: str) -> list[str]:
    """A string or a non-empty list of strings, as a list; each must be encodable as UTF-8."""
    if isinstance(value, str):
        items = [value]
    elif isinstance(value, list) and value:
        items = value
    else:
        shown = "an empty list" if value == [] else json_kind(value)
        raise ApiError(
            400, field, f"{field}: expected a string or a non-empty list of strings, got {shown}"
        )
    for i, item in enumerate(items):
        where = field if isinstance(value, str) else f"{field}[{i}]"
        if not isinstance(item, str):
            raise ApiError(400, field, f"{where}: expected a string, got {json_kind(item)}")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(
                400, field, f"{where}: holds a lone surrogate (\\ud800-\\udfff)"
            ) from None
    return items


def number(value: object, field: str, kind: type) -> int | float:
    # bool is a subclass of int: refused by name so that `true` is not beam size 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, field, f"{field}: expected {_kind_name(kind)}, got {json_kind(value)}")
    if kind is int and not isinstance(value, int):
        raise ApiError(400, field, f"{field}: expected an integer, got {value!r}")
    try:
        return kind(value)
    except OverflowError:  # an integer beyond any float: 1e309 written out
        raise ApiError(400, field, f"{field}: a number too large") from None


def _kind_name(kind: type) -> str:
    return "an integer" if kind is int else "a number"


def json_kind(value: object) -> str:
    """The JSON kind of a parsed value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"
