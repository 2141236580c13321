"""A request into the engine: the checks it passes, then its texts as the sentences the engine
queues, each prepared for the search by the `Translator`'s own rules, in the caller's thread.

Texts are cut into sentences line by line (`Translator.split`); a sentence longer than the position
table is refused (cut, its translation would end early without the client knowing); each is
given its target prefix and the language tags of its text's direction, and its max_len
decided as `Translator.translate` decides it. A blank sentence, and one without a letter
(`kept_as_written`), is answered at once, and an exact repeat of one (same text, same
options, same direction) from the translation cache, without decoding.

Constraints (a text's own target phrases, and the target terms of its glossary that each of
its sentences holds: `Texts.sentence_phrases`, as `Translator.translate` finds them) are
encoded and fitted by the Translator's own rule (`constraint_ids`) here, so that one that
cannot be met refuses the request (`TextRefused`) before anything is queued. They travel with
the sentence into its lane's `BeamState` (scheduler.py): a sentence with C of them is searched
with a beam of at least C + 1 and a max_len that holds them, as `Translator.search_batches`
searches it, and admission reserves the KV blocks of both.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence

import torch

from transformer_mt.config import DecodeConfig
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.inference.constrained import ConstraintsError
from transformer_mt.inference.encoding import LineTooLong
from transformer_mt.inference.languages import Direction
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translation import Translation, kept_as_written
from transformer_mt.inference.translator import Translator
from transformer_mt.search import constrained_beam_size, max_output_lengths
from transformer_mt.search.lengths import least_max_len
from transformer_mt.serve.contract import RequestTooLarge, TextRefused, TokenCallback
from transformer_mt.serve.engine.admission import Work
from transformer_mt.serve.engine.caches import LruCache, translation_key
from transformer_mt.serve.engine.job import Job
from transformer_mt.serve.engine.limits import ServeLimits
from transformer_mt.serve.engine.scheduler import Sentence, source_positions


class Intake:
    """Requests into jobs and the work they queue, from any thread. `lock` is the engine's: it
    guards `translations`, which the decoding thread fills."""

    def __init__(
        self,
        translator: Translator,
        limits: ServeLimits,
        translations: LruCache[Translation],
        lock: threading.Condition,
    ):
        self.translator = translator
        self.limits = limits
        self.translations = translations
        self._lock = lock
        self._next_key = 0

    def job(
        self,
        request: Texts,
        decode: DecodeConfig,
        on_token: TokenCallback | None,
        cancel: Callable[[Job], None],
        scope: str | None = None,
    ) -> tuple[Job, list[Work]]:
        """The job of `request` translated with `decode`, and the work to queue for it: one
        per sentence that is neither blank nor cached in `scope` (those have their results
        already; `Sentence.cache_source`).

        Raises:
            SettingError: a decode setting or a language the server refuses.
            RequestTooLarge: more texts, longer texts or more sentences than it takes, or a
                sentence longer than the position table.
            TextRefused: a text whose constraints cannot all be met, or a glossary term the
                model cannot produce.
        """
        self._check(request, decode)
        self._check_glossaries(request)
        directions = self._directions(request)
        split = self.translator.split(request, directions)
        if len(split.sentences) > self.limits.max_queue:
            raise RequestTooLarge(
                f"{len(split.sentences)} sentences; the queue holds {self.limits.max_queue}"
            )
        phrases = request.sentence_phrases(split)
        job = Job(split, directions, on_token, cancel, scope)
        try:
            prepared = [
                self._prepare(job, i, decode, request.prefix(line), directions[line], phrases[i])
                for i, line in enumerate(split.owners)
            ]
        except ConstraintsError as err:
            own = any(p.strip() for p in request.phrases(err.line))
            field = err.field or ("constraints" if own else "glossary")
            raise TextRefused(err.line, field, err.reason) from None
        return job, [w for w in prepared if w is not None]

    def _check(self, request: Texts, decode: DecodeConfig) -> None:
        """Refuse decode settings the server does not search with, and requests too large."""
        limits = self.limits
        decode.validate()
        if decode.sampling:
            raise SettingError("sampling", True, "the server searches (greedy or beam)")
        if decode.beam_size > limits.max_beam_size:
            raise SettingError(
                "beam_size", decode.beam_size, f"the server takes at most {limits.max_beam_size}"
            )
        texts = request.texts
        if len(texts) > limits.max_request_sentences:
            raise RequestTooLarge(
                f"{len(texts)} sentences; the server takes {limits.max_request_sentences}"
            )
        longest = max((len(t) for t in texts), default=0)
        if longest > limits.max_sentence_chars:
            raise RequestTooLarge(
                f"a text of {longest} characters; the server takes {limits.max_sentence_chars}"
            )

    def _check_glossaries(self, request: Texts) -> None:
        """Refuse a glossary with a target term the model cannot produce, naming the entry
        (`LineEncoding.check_glossary`), whether or not a text holds its source term."""
        checked: set[int] = set()  # a glossary for every text is one object
        for glossary in request.glossaries or ():
            if glossary is None or id(glossary) in checked:
                continue
            checked.add(id(glossary))
            try:
                self.translator.encoding.check_glossary(glossary)
            except TmtError as err:
                raise TextRefused(None, "glossary", str(err)) from None

    def _directions(self, request: Texts) -> list[Direction]:
        """The `Direction` of each text of `request`, each checked against the languages."""
        for pair in set(request.directions or ()):
            self.translator.languages.check(*pair)
        return self.translator.directions_of(request)

    def _prepare(
        self,
        job: Job,
        index: int,
        decode: DecodeConfig,
        prefix: str,
        direction: Direction,
        phrases: Sequence[str],
    ) -> Work | None:
        """The work for sentence `index` of `job`, or None when it is answered at once (blank,
        `kept_as_written`, or cached).

        Raises:
            ConstraintsError: its `phrases` cannot all be met, or its prefix does not fit,
                naming its text as the line.
            RequestTooLarge: it holds more tokens than the position table (`tmt translate`
                cuts such a line and says so; a client would not be told).
        """
        text = job.split.sentences[index]
        if kept_as_written(text, prefix, phrases):  # before the cache: nothing to look up
            job.results[index] = Translation.as_written(text, decode.n_best)
            return None
        key = translation_key(text, prefix, direction, decode, phrases, job.scope)
        with self._lock:
            cached = self.translations.get(key)
        if cached is not None:
            job.results[index] = cached
            return None
        line = job.split.owners[index]
        try:
            src = self.translator.encoding.source_ids(text, direction, cut=False)
        except LineTooLong as err:  # cut, its translation would end early, unsaid
            raise RequestTooLarge(f"text[{line}]: a sentence of {err}") from None
        if not src:
            job.results[index] = Translation.empty(decode.n_best)
            return None
        mask = torch.ones(1, 1, 1, source_positions(src), dtype=torch.bool)
        cap = self.translator.options.max_len_cap
        max_len = int(max_output_lengths(mask, decode, cap)[0])
        forced = self.translator.encoding.prefix_ids(prefix, direction, line)
        into = self.translator.target_language(direction)
        constraints = self.translator.encoding.constraint_ids(phrases, len(forced), line, into)
        if constraints:
            decode, max_len = self._constrained(decode, max_len, len(forced), constraints, line)
        with self._lock:
            self._next_key += 1
            sentence_key = self._next_key
        sentence = Sentence(
            sentence_key, src, decode, max_len, forced, constraints, scope=job.scope
        )
        return Work(sentence, job, index, key, direction)

    def _constrained(
        self,
        decode: DecodeConfig,
        max_len: int,
        prefix_len: int,
        constraints: list[list[int]],
        line: int,
    ) -> tuple[DecodeConfig, int]:
        """The search settings and max_len of a sentence with `constraints`, as
        `Translator.search_batches` and `BeamState.start` decide them: a beam of at least one
        more than it has constraints (`constrained_beam_size`), and room for its prefix, their
        tokens and one more (`least_max_len`). Admission reserves the KV blocks of both.

        Raises:
            ConstraintsError: a beam wider than the server takes (`ServeLimits.max_beam_size`).
        """
        beam_size = constrained_beam_size(decode.beam_size, len(constraints))
        if beam_size > self.limits.max_beam_size:
            raise ConstraintsError(
                line,
                f"its {len(constraints)} constraints need a beam of {beam_size}; the server "
                f"takes at most {self.limits.max_beam_size}",
            )
        needed = least_max_len(prefix_len, sum(map(len, constraints)))
        return dataclasses.replace(decode, beam_size=beam_size), max(max_len, needed)
