"""What the HTTP layer needs from a decoding engine, and the errors an engine refuses work with.

The HTTP side (serve/http/, and server.py) knows the engine only through these protocols, so
that its tests run against a small fake and the engine (serve/engine/) can change how it
batches and caches without touching HTTP code. The engine raises these exceptions and returns
`EngineStats`; the app turns each exception into its HTTP status.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from transformer_mt.config import DecodeConfig
from transformer_mt.documents.units import AlignedText
from transformer_mt.errors import TmtError
from transformer_mt.inference.languages import Languages, Pair
from transformer_mt.inference.requests import Texts

if TYPE_CHECKING:  # torch would come with them; they are only passed on here
    from transformer_mt.inference.checked import CheckedLine
    from transformer_mt.inference.translation import Translation

# on_token(sentence_index, text_so_far): greedy text of one sentence as its tokens are decided.
TokenCallback = Callable[[int, str], None]


class QueueFull(TmtError):
    """The admission queue has no room for the request: try again after `retry_after` seconds
    (HTTP 429 with a Retry-After header)."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class RequestTooLarge(TmtError):
    """The request can never be served with the engine's limits (HTTP 413)."""


class ShuttingDown(TmtError):
    """The engine is stopping and admits no new work (HTTP 503 with a Retry-After header)."""


class TextRefused(TmtError):
    """A request cannot be translated as asked: the constraints of one of its texts (its own,
    or its glossary's terms) cannot all be met, or a glossary holds a target term the model
    cannot produce (HTTP 400). `text` is the text's index in the request (None: the reason
    names the glossary entry), `field` the request key the constraints came from."""

    def __init__(self, text: int | None, field: str, reason: str):
        super().__init__(reason if text is None else f"text[{text}]: {reason}")
        self.text, self.field, self.reason = text, field, reason


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine, cheap to take from any thread (the /metrics scrape)."""

    queue_sentences: int  # waiting for admission
    running_sentences: int
    running_hypotheses: int
    kv_blocks_total: int
    kv_blocks_used: int
    kv_blocks_reserved: int  # held back by admission: the most the running sentences may take
    kv_block_size: int  # positions per block
    kv_dense_positions: int  # what a dense cache, one copy per hypothesis, would hold now
    generated_tokens: int  # counter since start
    tokens_per_second: float  # over the last ~10 s
    requests_done: int
    requests_cancelled: int
    cache_hits: dict[str, int]  # by cache: {"translation": n, "encoder": n, "prefix": n}
    cache_misses: dict[str, int]
    cache_entries: dict[str, int]
    tagged_texts: int  # counter since start: texts that held a language tag, taken out


class RequestLimits(Protocol):
    """The per-request limits the HTTP layer checks before submitting (engine.limits)."""

    max_request_sentences: int
    max_sentence_chars: int


class Job(Protocol):
    """One submitted request.

    `future` resolves to a list of `Translation`, one per input text in input order, or to
    a `TmtError`; `queue_seconds` is the time from submit to the admission of the job's first
    sentence (None until then).
    """

    future: concurrent.futures.Future
    queue_seconds: float | None

    def cancel(self) -> None:
        """Free the job's work; its future is cancelled."""


class Engine(Protocol):
    """A decoding engine: thread-safe `submit`, a background thread between start and stop."""

    defaults: DecodeConfig  # the checkpoint's decode settings
    limits: RequestLimits
    languages: Languages  # the directions a request may ask for, and the default one
    # Why the decoding thread died, None while it lives: /health then answers 503 and the
    # server exits, so that a supervisor restarts it.
    failure: BaseException | None

    def submit(
        self,
        texts: Texts | list[str],
        decode: DecodeConfig,
        on_token: TokenCallback | None = None,
        *,
        scope: str | None = None,
    ) -> Job:
        """Queue `texts`; raises QueueFull, RequestTooLarge, ShuttingDown, TextRefused, or a
        TmtError naming a decode setting or a language it refuses. `on_token` is called with beam
        size 1 only. `scope`: whose cached work it may reuse (the API key's; requests of other
        scopes never share a cache entry with it). `texts`: plain, or `Texts` with per-text options:
        directions (each one of `languages.directions`; None: `languages.default` for every text),
        prefixes, constraints, and glossaries whose target terms found in a sentence are that
        sentence's constraints (`Texts.sentence_phrases`).

        Called on the server's event loop (a request with glossaries, constraints or much
        text: from a worker thread, `jobs.submit`): it must return at once (tokenize and
        queue), never wait for a decoding step."""

    def align(self, source: str, translation: Translation, direction: Pair) -> AlignedText:
        """The best of `translation`, the translation of `source` in `direction` this engine
        made, aligned word by word (what
        documents need to put inline markup back, serve/http/markup.py). Thread-safe; called off
        the event loop: it runs the model."""

    def check(self, job: Job) -> list[CheckedLine]:
        """The dropped-content check of a finished `job` (inference/checked.py): per text its
        translation (the job's: nothing is retried) and its sentences' reports. Thread-safe;
        called off the event loop: it runs the model."""

    def start(self) -> None:
        """Start the decoding thread (once: a stopped engine refuses, with a TmtError)."""

    def stop(self, drain: bool = True) -> None:
        """Refuse new work (ShuttingDown); with `drain`, return once admitted work is done."""

    def stats(self) -> EngineStats:
        """The engine's state now."""
