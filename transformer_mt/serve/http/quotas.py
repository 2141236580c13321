"""Who may translate, and how much: API keys and rate limits, one mechanism for both APIs.

Every request to a translation or detection endpoint (/v1/translate, /v1/translate/stream,
LibreTranslate's /translate and /detect) passes `Quotas.admit` once its body is parsed and
before any work is done for it; the language lists, /health, /metrics and the web page are
free, as LibreTranslate leaves /languages free. Settings: `HttpSettings.api_keys`, `req_limit`
and `char_limit` (`tmt serve --api-keys`, `--req-limit`, `--char-limit`).

- With a keys file (keys.py), a request must carry a key of it: in an `Authorization: Bearer`
  header (either API) or LibreTranslate's `api_key` field. None, or one the file does not
  hold: 403. The key's requests and characters per minute are limited as the file says.
- With `req_limit`, the requests of each client address (the connection's peer: the server
  does not read X-Forwarded-For) are limited per minute, with or without keys.
- A request of n texts counts n requests (as LibreTranslate counts a batch) and the sum of
  its texts' lengths in characters (code points). Over a limit: 429 with Retry-After, and
  nothing is counted; a request that could never fit a limit, however long it waited: 413.
- `char_limit` bounds the characters of a request, the sum of its texts, as LibreTranslate's
  `--char-limit` counts a batch: over it, 413 (each text is also bounded by the engine's
  `max_sentence_chars`, which the parsers check).

The limits are counted in a moving window (moving_window.py): a request passes when the units
counted in the last 60 s, its own included, are within the limit, as LibreTranslate counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformer_mt.serve.http.body import ApiError
from transformer_mt.serve.http.keys import ApiKeys
from transformer_mt.serve.http.moving_window import MovingWindows
from transformer_mt.serve.http_settings import HttpSettings

MISSING_KEY = (
    "an API key is required (an Authorization: Bearer header, or the api_key field); "
    "ask the server's operator for one"
)
# LibreTranslate's words for a key it does not know.
UNKNOWN_KEY = "Invalid API key"


def bearer_key(authorization: str | None) -> str | None:
    """The key of an `Authorization: Bearer KEY` header value, None without one."""
    if authorization is None:
        return None
    scheme, _, key = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return key.strip() or None


@dataclass(frozen=True)
class _Charge:
    """One limit a request is counted against: `cost` units of at most `amount` a minute for
    `holder`."""

    amount: int
    holder: str  # "key:<digest>:<unit>" or "address:<host>"
    cost: int
    unit: str  # "requests" or "characters", for messages
    whose: str  # "this key" or "this address", for messages


class Quotas:
    """The keys and the limits of one server (see the module). Not thread-safe: the event
    loop is its one user.

    Raises:
        SettingError: naming api_keys, a keys file that cannot be read or does not parse.
    """

    def __init__(self, settings: HttpSettings):
        self.keys = ApiKeys(settings.api_keys) if settings.api_keys else None
        self.per_address = settings.req_limit or None
        self.char_limit = settings.char_limit
        self._windows = MovingWindows()

    def admit(self, key: str | None, address: str, texts: Sequence[str]) -> str | None:
        """Count a request of `texts` from `address` with `key` (None: none given); the scope
        of the engine's caches it may use: its key's (`KeyEntry.id`) where keys are required,
        so that no key learns from a cache hit what another has translated; else None, one
        scope for every client.

        Raises:
            ApiError: 403 without a key, or with one the keys file lacks, where keys are
                required; 413 for more than a limit allows in one request; 429 over a limit
                (`retry_after` set), with nothing counted.
        """
        n_chars = sum(map(len, texts))
        if self.char_limit is not None and n_chars > self.char_limit:
            raise ApiError(
                413,
                "text",
                f"text: {n_chars} characters in this request; the server takes at most "
                f"{self.char_limit} per request",
            )
        charges, scope = self._charges(key, address, len(texts), n_chars)
        for charge in charges:
            if charge.cost > charge.amount:
                raise ApiError(
                    413,
                    "text",
                    f"this request counts as {charge.cost} {charge.unit}; {charge.whose} may "
                    f"send {charge.amount} per minute",
                )
        for charge in charges:
            if not self._windows.fits(charge.holder, charge.amount, charge.cost):
                raise ApiError(
                    429,
                    None,
                    f"Slowdown: {charge.amount} {charge.unit} per 1 minute for {charge.whose}",
                    retry_after=self._windows.retry_after(
                        charge.holder, charge.amount, charge.cost
                    ),
                )
        for charge in charges:
            self._windows.hit(charge.holder, charge.cost)
        return scope

    def reload_keys(self) -> None:
        """Read the keys file again before the next request (SIGHUP)."""
        if self.keys is not None:
            self.keys.reload_soon()

    def _charges(
        self, key: str | None, address: str, n_texts: int, n_chars: int
    ) -> tuple[list[_Charge], str | None]:
        """What the request costs against each limit, and its key's holder name (None
        without keys)."""
        charges, holder = [], None
        if self.keys is not None:
            if not key:
                raise ApiError(403, None, MISSING_KEY)
            entry = self.keys.lookup(key)
            if entry is None:
                raise ApiError(403, None, UNKNOWN_KEY)
            holder = f"key:{entry.id}"
            for limit, cost, unit in (
                (entry.requests_per_minute, n_texts, "requests"),
                (entry.characters_per_minute, n_chars, "characters"),
            ):
                if limit is not None and cost > 0:
                    charges.append(_Charge(limit, f"{holder}:{unit}", cost, unit, "this key"))
        if self.per_address is not None:
            at = f"address:{address}"
            charges.append(_Charge(self.per_address, at, n_texts, "requests", "this address"))
        return charges, holder
