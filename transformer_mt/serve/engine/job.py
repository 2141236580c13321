"""One request inside the engine: its future, its sentences' results, and its cancellation
(`contract.Job` is what the HTTP side sees of it)."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Sequence

from transformer_mt.inference.languages import Direction
from transformer_mt.inference.sentences import SplitLines
from transformer_mt.inference.translation import Translation, joined_lines
from transformer_mt.serve.contract import TokenCallback


class Job:
    """One request: its future (list[Translation], one per text in input order) and its
    cancellation. Its texts are searched as the sentences of `split` (`Translator.split`),
    each text in its `directions`; `results` holds one translation per sentence, joined back
    into texts when the last is in. `cancel` is the engine's, which takes the job's work away."""

    def __init__(
        self,
        split: SplitLines,
        directions: Sequence[Direction],
        on_token: TokenCallback | None,
        cancel: Callable[[Job], None],
        scope: str | None = None,
    ):
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.split = split
        self.directions = directions
        self.results: list[Translation | None] = [None] * len(split.sentences)
        self.pending = 0
        self.on_token = on_token
        self.submitted = time.monotonic()
        self.queue_seconds: float | None = None  # submit to the admission of its first sentence
        self._streamed = [""] * len(split.sentences)  # greedy text of each sentence so far
        self._cancel = cancel
        self.scope = scope  # whose cached work its sentences may reuse (`Engine.submit`)

    def translations(self) -> list[Translation]:
        """One translation per text, once every sentence has its own."""
        return joined_lines(self.split, self.results)

    def stream(self, sentence: int, text: str) -> None:
        """Tell `on_token` the text so far of the text that `sentence` belongs to: its
        sentences' translations where finished, their greedy text so far elsewhere."""
        self._streamed[sentence] = text
        owner = self.split.owners[sentence]
        first = self.split.owners.index(owner)
        sentences = range(first, first + len(self.split.lines[owner].sentences))
        parts = [
            self._streamed[i] if self.results[i] is None else self.results[i].texts[0]
            for i in sentences
        ]
        self.on_token(owner, self.split.lines[owner].join(parts))

    def cancel(self) -> None:
        """Stop its work: queued sentences leave the queue, running ones the batch (their KV
        blocks go back to the pool), and the future is cancelled."""
        self._cancel(self)

    def settle(self, result: list[Translation] | None, error: BaseException | None) -> bool:
        """Resolve the future with `result` or `error` unless it is resolved or cancelled
        already; whether it was resolved now. Only the engine calls it, with its lock held
        or before the job is queued, so that no two calls race."""
        future = self.future
        if future.done() or not future.set_running_or_notify_cancel():
            return False
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
        return True
