"""A decoding engine for the HTTP tests, honouring serve.contract's `Engine` without a model.

It "translates" a text by reversing its words (`fake_translation`), one word per step: every
running job advances each step, so concurrent requests overlap as in continuous batching, and
each step sleeps `step_seconds`. Greedy jobs (beam size 1) report each step's text to
`on_token`. A job holding the text FAIL fails with a RuntimeError (an engine fault), one
holding DIE kills the decoding thread (`failure` says why, later submits raise); a submit
beyond `max_queue` sentences in the engine raises QueueFull. Texts seen before in the same
scope count as hits of a "translation" cache. Its dropped-content check flags a text holding
DROP (`check`).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass, field

from transformer_mt.config import DecodeConfig
from transformer_mt.data.specials import OWN_SPECIALS
from transformer_mt.documents.units import AlignedText
from transformer_mt.inference.checked import CheckedLine, SentenceReport
from transformer_mt.inference.dropped import Scores
from transformer_mt.inference.languages import Languages
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translation
from transformer_mt.serve.contract import (
    EngineStats,
    QueueFull,
    RequestTooLarge,
    ShuttingDown,
    TokenCallback,
)

FAIL = "FAIL"
DIE = "DIE"
DROP = "DROP"
RETRY_AFTER = 1.5
KV_BLOCKS = 64


def fake_translation(text: str, prefix: str | None = None) -> str:
    """What the fake engine translates `text` to: its words reversed, after `prefix`."""
    words = ([prefix] if prefix else []) + text.split()[::-1]
    return " ".join(words)


def fake_nbest(text: str, prefix: str | None, n_best: int) -> Translation:
    best = fake_translation(text, prefix)
    length = len(best.split())
    texts = [best] + [f"{best} ({k})" for k in range(1, n_best)]
    return Translation(texts, [-float(length + k) for k in range(n_best)])


@dataclass(frozen=True)
class FakeLimits:
    max_request_sentences: int = 8
    max_sentence_chars: int = 200
    max_queue: int = 64  # sentences waiting or running


DEFAULTS = DecodeConfig(beam_size=2)
LIMITS = FakeLimits()
LANGUAGES = Languages.of(OWN_SPECIALS, [("de", "en")])  # a model without language tags


@dataclass
class FakeJob:
    texts: list[str]
    decode: DecodeConfig
    prefixes: list[str] | None
    on_token: TokenCallback | None
    directions: list | None
    engine: FakeEngine
    submitted: float = field(default_factory=time.monotonic)
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    queue_seconds: float | None = None
    steps: int = 0
    constraints: list | None = None
    glossaries: list | None = None

    def cancel(self) -> None:
        self.engine.cancel(self)

    def target(self, i: int) -> list[str]:
        prefix = self.prefixes[i] if self.prefixes else None
        return fake_translation(self.texts[i], prefix).split()


class FakeEngine:
    def __init__(
        self,
        defaults: DecodeConfig = DEFAULTS,
        limits: FakeLimits = LIMITS,
        step_seconds: float = 0.002,
    ):
        self.defaults, self.limits, self.step_seconds = defaults, limits, step_seconds
        self.languages = LANGUAGES
        self.lock = threading.Lock()
        self.waiting: list[FakeJob] = []
        self.running: list[FakeJob] = []
        self.jobs: list[FakeJob] = []  # every job submitted, for the tests to inspect
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.most_running = 0  # the most jobs decoded in one step
        self.generated_tokens = self.done = self.cancelled = 0
        self.seen: set[tuple[str | None, str]] = set()  # (scope, text) translated
        self.hits = self.misses = 0
        self.failure: BaseException | None = None

    def submit(
        self,
        texts: Texts | list[str],
        decode: DecodeConfig,
        on_token: TokenCallback | None = None,
        *,
        scope: str | None = None,
    ) -> FakeJob:
        request = Texts.plain(texts)
        texts = list(request.texts)
        decode.validate()
        with self.lock:
            if self.failure is not None:
                raise ShuttingDown("the engine has stopped")
            if self.stopping:
                raise ShuttingDown("the engine is stopping")
            if len(texts) > self.limits.max_request_sentences:
                raise RequestTooLarge(f"{len(texts)} sentences in one request")
            held = sum(len(job.texts) for job in self.waiting + self.running)
            if held + len(texts) > self.limits.max_queue:
                raise QueueFull(f"{held} sentences queued", retry_after=RETRY_AFTER)
            greedy = decode.beam_size == 1
            job = FakeJob(
                texts,
                decode,
                _listed(request.prefixes),
                on_token if greedy else None,
                None if request.directions is None else list(request.directions),
                self,
                constraints=_listed(request.constraints),
                glossaries=_listed(request.glossaries),
            )
            self.waiting.append(job)
            self.jobs.append(job)
            for text in texts:
                self.hits += (scope, text) in self.seen
                self.misses += (scope, text) not in self.seen
                self.seen.add((scope, text))
        return job

    def cancel(self, job: FakeJob) -> None:
        with self.lock:
            for queue in (self.waiting, self.running):
                if job in queue:
                    queue.remove(job)
                    self.cancelled += 1
            job.future.cancel()

    def align(self, source: str, translation, direction) -> AlignedText:
        """The fake's translation reverses the words: word i of n is target word n - 1 - i."""
        n = len(source.split())
        return AlignedText(translation.texts[0], tuple((i, n - 1 - i) for i in range(n)))

    def check(self, job: FakeJob) -> list[CheckedLine]:
        """Each text one sentence; a text holding DROP is flagged for its coverage."""
        checked = []
        for text, translation in zip(job.texts, job.future.result(), strict=True):
            dropped = DROP in text.split()
            scores = Scores(0.2 if dropped else 1.0, 1.0, 0.0, empty=False, copy=False)
            report = SentenceReport(text, ("coverage",) if dropped else (), scores)
            checked.append(CheckedLine(translation, (report,) if text.strip() else ()))
        return checked

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="fake-engine", daemon=True)
        self.thread.start()

    def stop(self, drain: bool = True) -> None:
        with self.lock:
            self.stopping = True
            if not drain:
                for job in self.waiting + self.running:
                    job.future.cancel()
                self.waiting, self.running = [], []
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()

    def stats(self) -> EngineStats:
        with self.lock:
            running = sum(len(job.texts) for job in self.running)
            hypotheses = sum(len(job.texts) * job.decode.beam_size for job in self.running)
            return EngineStats(
                queue_sentences=sum(len(job.texts) for job in self.waiting),
                running_sentences=running,
                running_hypotheses=hypotheses,
                kv_blocks_total=KV_BLOCKS,
                kv_blocks_used=min(hypotheses, KV_BLOCKS),
                kv_blocks_reserved=min(hypotheses, KV_BLOCKS),
                kv_block_size=16,
                kv_dense_positions=16 * min(hypotheses, KV_BLOCKS),
                generated_tokens=self.generated_tokens,
                tokens_per_second=float(running) / self.step_seconds,
                requests_done=self.done,
                requests_cancelled=self.cancelled,
                cache_hits={"translation": self.hits},
                cache_misses={"translation": self.misses},
                cache_entries={"translation": len(self.seen)},
                tagged_texts=0,
            )

    def _run(self) -> None:
        try:
            self._decode()
        except RuntimeError as err:
            with self.lock:
                self.failure = err
                for job in self.waiting + self.running:
                    job.future.set_exception(ShuttingDown(f"the engine stopped: {err}"))

    def _decode(self) -> None:
        while True:
            with self.lock:
                now = time.monotonic()
                for job in self.waiting:
                    job.queue_seconds = now - job.submitted
                self.running += self.waiting
                self.waiting = []
                if self.stopping and not self.running:
                    return
            time.sleep(self.step_seconds)
            with self.lock:
                self.most_running = max(self.most_running, len(self.running))
                for job in list(self.running):
                    self._step(job)

    def _step(self, job: FakeJob) -> None:
        job.steps += 1
        targets = [job.target(i) for i in range(len(job.texts))]
        for i, words in enumerate(targets):
            if job.steps <= len(words):
                self.generated_tokens += 1
                if job.on_token is not None:
                    job.on_token(i, " ".join(words[: job.steps]))
        if job.steps < max(1, *map(len, targets)):
            return
        if DIE in job.texts:
            raise RuntimeError("the fake engine died")
        self.running.remove(job)
        self.done += 1
        if FAIL in job.texts:
            job.future.set_exception(RuntimeError("the fake engine broke"))
            return
        prefixes = job.prefixes or [None] * len(job.texts)
        job.future.set_result(
            [
                fake_nbest(text, prefix, job.decode.n_best)
                for text, prefix in zip(job.texts, prefixes, strict=True)
            ]
        )


def _listed(values: tuple | None) -> list | None:
    """A per-text option of `Texts` as the list a test compares against."""
    return None if values is None else [list(v) if isinstance(v, tuple) else v for v in values]
