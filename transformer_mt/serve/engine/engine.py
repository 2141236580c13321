"""The serving engine: requests in from any thread, one decoding thread, answers as futures.

`submit` turns texts into sentences (intake.py: the `Translator`'s own rules, the translation
cache, constraints) and queues them, first come first served, in a bounded queue. The
decoding thread admits queued sentences between steps while the KV-block and source-token
budgets allow, encodes them (or takes their encoder output from the encoder cache), and steps
the `ContinuousBatch`. A request is answered when its last sentence finishes, its sentences'
translations joined back into one per text. Asked for a report, the server has a finished job
checked for dropped content (`check`), outside the decoding thread.

Sentences of every direction share the batch: a direction is only ids in front of the source
and of the forced target (`Translator.direction`), so the encoder cache (keyed by the source's
ids), the prefix cache (by the source's ids, then the target's) and the translation cache
(`translation_key`) never mix two directions the model is told apart.

The budgets and the queue are `admission.Admission`'s; the blocks actually used (shared
prefixes, freed beams) are fewer than it reserves, and /metrics shows both.

One request cannot take others down with it. A job's future is resolved once, by the first
of its sentences to fail or by its last to finish; its other sentences then leave. A decoding
step that fails cannot say which sentence made it fail: when it held the sentences of one
request, that request fails; otherwise the running sentences go back to the front of the
queue marked `solo`, and each is decoded again alone, so that the next failure names its
request. Should the decoding thread itself die, `failure` says why, every waiting request
fails, and new ones are refused (the server answers /health with 503 and exits).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence

import torch

from transformer_mt.config import DecodeConfig
from transformer_mt.documents.alignment import AlignedTranslator
from transformer_mt.documents.units import AlignedText
from transformer_mt.errors import SettingError, TmtError, one_line
from transformer_mt.inference.checked import CheckedLine, check_sentences, checked_lines
from transformer_mt.inference.languages import Pair
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translation, Translator
from transformer_mt.search.results import ranked_results
from transformer_mt.serve.contract import EngineStats, ShuttingDown, TokenCallback
from transformer_mt.serve.engine.admission import Admission, Work
from transformer_mt.serve.engine.caches import LruCache
from transformer_mt.serve.engine.intake import Intake
from transformer_mt.serve.engine.job import Job
from transformer_mt.serve.engine.limits import ServeLimits, group_rows, longest_output, new_pool
from transformer_mt.serve.engine.prefix_cache import PrefixTree
from transformer_mt.serve.engine.scheduler import ContinuousBatch, source_positions

log = logging.getLogger("transformer_mt.serve")

# Token budget (sentences x longest) of one encoder batch of newly admitted sentences. They
# arrive a few at a time with any lengths; small length-sorted batches pad little, and matrix
# products of this many rows run as fast per row as large ones.
ENCODE_TOKENS = 256


class Engine:
    """A translation model served to many clients at once (see the module docstring)."""

    def __init__(self, translator: Translator, limits: ServeLimits | None = None):
        """The engine of `translator`, taking on as much as `limits` says (None: the defaults)."""
        limits = ServeLimits() if limits is None else limits
        cfg = translator.model.cfg
        if cfg.attention_pattern != "full":
            raise SettingError(
                "model.attention_pattern",
                cfg.attention_pattern,
                "the serving engine's paged cache holds every key of a sentence and reads them "
                "all (full attention only); translate this model with tmt translate",
            )
        self.translator = translator
        self.defaults = translator.decode
        self.limits = limits
        self.languages = translator.languages
        self.languages.check(*self.languages.default)  # a model without tags: its own only
        self.max_batch_tokens = limits.max_batch_tokens or self.defaults.max_tokens
        self.pool = new_pool(translator, limits, self.max_batch_tokens)
        self.translations: LruCache[Translation] = LruCache(limits.cache_entries)
        self.encoder_outputs: LruCache[tuple] = LruCache(limits.cache_entries)  # memory, cross
        self.prefixes = PrefixTree(self.pool, limits.cache_entries)
        self.batch = self._new_batch()
        self.admission = Admission(
            self.pool, self.prefixes, self.max_batch_tokens, limits.max_queue
        )
        self._dropped: set[Job] = set()  # jobs whose sentences leave at the next step
        self.failure: BaseException | None = None  # why the decoding thread died, if it did
        self._cond = threading.Condition()
        self.intake = Intake(translator, limits, self.translations, self._cond)
        self._accepting = True
        self._stop = False
        self._thread: threading.Thread | None = None
        self._generated = 0
        self._dense_positions = 0
        self._recent: deque[tuple[float, int]] = deque()
        self._done = self._cancelled_requests = 0

    @classmethod
    def from_checkpoint(
        cls, path: str, *, limits: ServeLimits | None = None, **loading: object
    ) -> Engine:
        """The engine of checkpoint `path`, loaded as `Translator.from_checkpoint` loads it
        with the keyword arguments `loading` (device, quantize, lines, shortlist, decode
        changes: one list of loading options, the Translator's); a request that names no
        languages is translated in the translator's default direction.

        Raises:
            SettingError: naming src_lang or tgt_lang, a direction the model does not offer
                (`Languages.check`), or another loading option it refuses.
        """
        return cls(Translator.from_checkpoint(path, **loading), limits)

    def describe(self) -> str:
        """One line on what the engine holds, for the server's start."""
        pool = self.pool
        mib = pool.n_blocks * pool.block_bytes / 2**20
        reach = max(longest_output(pool.n_blocks, pool.block_size, self.defaults.beam_size), 0)
        reach = min(reach, self.translator.model.cfg.max_positions)  # the model's own bound
        return (
            f"on {self.translator.device.type}: "
            f"KV cache: {pool.n_blocks} blocks of {pool.block_size} position(s) ({mib:.0f} MiB), "
            f"outputs of up to {reach} positions at beam {self.defaults.beam_size}; "
            f"up to {self.max_batch_tokens} source tokens decoded together, "
            f"{self.limits.max_queue} sentences queued"
        )

    # --- any thread ------------------------------------------------------------------------

    def submit(
        self,
        texts: Texts | Sequence[str],
        decode: DecodeConfig,
        on_token: TokenCallback | None = None,
        *,
        scope: str | None = None,
    ) -> Job:
        """Queue `texts` (plain, or `Texts` with per-text prefixes, directions, constraints and
        glossaries) for translation with `decode`, reusing cached work of `scope` only; see the
        module docstring and `contract.Engine.submit`."""
        request = Texts.plain(texts)
        job, work = self.intake.job(request, decode, on_token, self._cancel, scope)
        with self._cond:
            if self.failure is not None:
                raise ShuttingDown(f"the decoding engine has stopped ({one_line(self.failure)})")
            if not self._accepting:
                raise ShuttingDown("the server is shutting down")
            self.admission.enqueue(work)
            job.pending = len(work)
            self._cond.notify()
        if not work:
            job.settle(job.translations(), None)
        return job

    def align(self, source: str, translation: Translation, direction: Pair) -> AlignedText:
        """The best of `translation` as the translation of `source` aligned word by word, by
        the forced passes of documents' `AlignedTranslator` over the engine's model (sentence
        by sentence where it was translated so), in the caller's thread (the
        model holds no state of its own between calls, so it may run beside the decoding
        thread)."""
        with torch.inference_mode():
            document = Texts.of([source], directions=[direction])
            aligner = AlignedTranslator(self.translator, document=document)
            return aligner.aligned(source, translation)

    def check(self, job: Job) -> list[CheckedLine]:
        """The dropped-content check of finished `job` (inference/checked.py): its texts'
        sentences checked by forced passes of the engine's model in the caller's thread (as
        `align`). Not retried: every text was translated sentence by sentence
        (`Translator.split`), so a flagged sentence has no sentence end to be cut at. One
        `CheckedLine` per text."""
        split = job.split
        directions = [job.directions[line] for line in split.owners]
        with torch.inference_mode():
            results = check_sentences(
                self.translator, split.sentences, directions, job.results, None
            )
        return checked_lines(split, results)

    def start(self) -> None:
        """Start the decoding thread; nothing more when it runs already (`start_in_thread`
        starts the engine it is given, started or not).

        Raises:
            TmtError: the engine has been stopped; it takes no work again.
        """
        with self._cond:
            if self._stop:
                raise TmtError("the engine has been stopped; make another to serve again")
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="tmt-decoder", daemon=True)
            self._thread.start()

    def stop(self, drain: bool = True) -> None:
        """Refuse new requests; with `drain`, finish the queued and running ones first."""
        with self._cond:
            self._accepting = False
            if not drain:
                admission = self.admission
                for work in [*admission.queue, *admission.running.values()]:
                    self._dropped.add(work.job)
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def stats(self) -> EngineStats:
        with self._cond:
            now = time.monotonic()
            recent = [n for t, n in self._recent if now - t <= 10.0]
            sentences = list(self.admission.running.values())
            return EngineStats(
                queue_sentences=len(self.admission.queue),
                running_sentences=len(sentences),
                running_hypotheses=sum(w.sentence.decode.beam_size for w in sentences),
                kv_blocks_total=self.pool.n_blocks,
                kv_blocks_used=self.pool.n_used,
                kv_blocks_reserved=self.admission.reserved,
                kv_block_size=self.pool.block_size,
                kv_dense_positions=self._dense_positions,
                generated_tokens=self._generated,
                tokens_per_second=sum(recent) / 10.0,
                requests_done=self._done,
                requests_cancelled=self._cancelled_requests,
                cache_hits={
                    "translation": self.translations.hits,
                    "encoder": self.encoder_outputs.hits,
                    "prefix": self.prefixes.hits,
                },
                cache_misses={
                    "translation": self.translations.misses,
                    "encoder": self.encoder_outputs.misses,
                    "prefix": self.prefixes.misses,
                },
                cache_entries={
                    "translation": len(self.translations),
                    "encoder": len(self.encoder_outputs),
                    "prefix": len(self.prefixes),
                },
                tagged_texts=self.translator.encoding.tagged_lines,
            )

    def _cancel(self, job: Job) -> None:
        if job.future.cancel():  # False: answered already
            with self._cond:
                self._dropped.add(job)
                self._cancelled_requests += 1
                self._cond.notify()

    # --- the decoding thread ---------------------------------------------------------------

    def _loop(self) -> None:
        try:
            with torch.inference_mode():
                while self._serve_one_step():
                    pass
        except BaseException as err:  # noqa: BLE001 - said by `failure`, /health and the exit
            log.critical("the decoding engine stopped", exc_info=err)
            self._die(err)

    def _serve_one_step(self) -> bool:
        """Admit, then decode one step; False once stopped with nothing left to do."""
        with self._cond:
            while not (self._dropped or self._stop or not self.admission.idle):
                self._cond.wait()
            if self._stop and self.admission.idle:
                return False
            dropped, self._dropped = self._dropped, set()
            self._drop(dropped)
            admitted, refused = self.admission.admit()
            for work, err in refused:
                self._fail_job(work.job, err)
        try:
            if admitted:
                self._start(admitted)
            if self.batch.lanes:
                self._step()
        except Exception as err:  # noqa: BLE001 - one bad step must not stop serving
            log.exception("decoding step failed")
            self._recover(err)
        return True

    def _start(self, admitted: list[Work]) -> None:
        """Encoder outputs (cached or computed together) for the admitted sentences; join."""
        missing = []
        for work in admitted:
            cached = self.encoder_outputs.get(work.sentence.cache_source)
            if cached is None:
                missing.append(work)
            else:
                work.sentence.memory, work.sentence.cross = cached
        if missing:
            model = self.translator.model
            sources = [w.sentence.src_ids for w in missing]
            for batch in self.translator.batches(sources, ENCODE_TOKENS):
                memory = model.encode(batch.src_ids, batch.src_mask)
                layers = model.decoder.cross_keys_values(memory, self.translator.cache_dtype)
                for row, i in enumerate(batch.indices.tolist()):
                    sentence = missing[i].sentence
                    length = source_positions(sentence.src_ids)
                    sentence.memory = memory[row, :length]
                    sentence.cross = [(k[row, :, :length], v[row, :, :length]) for k, v in layers]
                    self.encoder_outputs.put(
                        sentence.cache_source, (sentence.memory, sentence.cross)
                    )
        for work in admitted:
            sentence = work.sentence
            if sentence.prefix:
                sentence.reused = self.prefixes.lookup(sentence.cache_source, sentence.prefix)
        self.batch.join([w.sentence for w in admitted])

    def _step(self) -> None:
        rows = self.batch.n_rows
        done, greedy = self.batch.step()
        now = time.monotonic()
        with self._cond:
            self._generated += rows
            self._dense_positions = int(self.batch.cache.lengths.sum())
            self._recent.append((now, rows))
            while self._recent and now - self._recent[0][0] > 10.0:
                self._recent.popleft()
        for sentence in done:
            hypotheses = self.batch.finished.pop(sentence.key)
            (result,) = ranked_results([hypotheses], sentence.decode.n_best)
            work = self.admission.running[sentence.key]
            source = work.job.split.sentences[work.index] if sentence.decode.replace_unk else None
            self._finish(work, self.translator.writer.translation(result, work.direction, source))
        unk = self.translator.specials.unk
        for key, tokens in greedy.items():
            work = self.admission.running[key]
            if work.job.on_token is not None:
                if work.sentence.decode.replace_unk and unk in tokens:
                    tokens = tokens[: tokens.index(unk)]  # its copy is chosen at the end
                text = streamable(self.translator.writer.text(tokens, work.direction))
                if text != work.streamed:
                    work.streamed = text
                    work.job.stream(work.index, text)

    def _finish(self, work: Work, translation: Translation) -> None:
        job = work.job
        with self._cond:
            self.admission.release(work)
            self.translations.put(work.cache_key, translation)
            job.results[work.index] = translation
            job.pending -= 1
            if job.pending == 0:
                self._done += job.settle(job.translations(), None)

    def _drop(self, jobs: set[Job]) -> None:
        """Take the sentences of `jobs` (cancelled or failed) out of the queue and the batch,
        their blocks freed (lock held)."""
        if not jobs:
            return
        running = self.admission.running
        keys = {k for k, w in running.items() if w.job in jobs}
        for sentence in self.batch.remove(keys):
            self.admission.release(running[sentence.key])
        self.admission.drop_queued(jobs)

    def _fail_job(self, job: Job, err: BaseException) -> None:
        """Answer `job` with `err`; its other sentences leave at the next step (lock held)."""
        job.settle(None, err)
        self._dropped.add(job)

    def _recover(self, err: Exception) -> None:
        """After a failed step: start from an empty batch. The failure is the request's when
        the batch held only its sentences; otherwise each running sentence is decoded again
        alone, at the front of the queue, so that a failure names the one request it is due to.
        """
        failure = TmtError(f"decoding failed: {one_line(err)}")
        self.batch.cache.release_all()
        self.batch = self._new_batch()
        with self._cond:
            running = list(self.admission.running.values())
            for work in running:
                self.admission.release(work)
            jobs = {work.job for work in running}
            if len(jobs) == 1:
                self._fail_job(jobs.pop(), failure)
                return
            for work in running:
                work.restart(solo=True)
            self.admission.requeue(running)
            log.warning(
                "decoding %d sentences again, each alone, to find the failing one", len(running)
            )

    def _die(self, err: BaseException) -> None:
        """The decoding thread is ending on `err`: every request still waiting fails, and new
        ones are refused."""
        failure = ShuttingDown(f"the decoding engine stopped: {one_line(err)}")
        with self._cond:
            self.failure = err
            self._accepting = False
            admission = self.admission
            for work in [*admission.queue, *admission.running.values()]:
                work.job.settle(None, failure)
            admission.queue.clear()

    def _new_batch(self) -> ContinuousBatch:
        translator = self.translator
        return ContinuousBatch(
            translator.model,
            self.pool,
            translator.cache_dtype,
            self.prefixes,
            group_rows(translator.model.cfg, self.limits),
            translator.options.ids,
            translator.options.vocabulary,
        )


def streamable(text: str) -> str:
    """A greedy hypothesis' text as a stream may show it: without the replacement characters
    SentencePiece writes for the bytes of a character not yet complete (byte fallback spells a
    rare character in several pieces), which the next event would take back. A U+FFFD the
    model writes itself shows in the result."""
    return text.rstrip("\ufffd")
