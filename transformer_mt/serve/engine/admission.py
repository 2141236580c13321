"""Admission: the bounded queue of sentences, taken in turns by request, and the budgets a
sentence must fit to join the running batch.

A sentence joins when the running sentences' source tokens stay within `max_batch_tokens` and
the KV pool can hold the most blocks its beams could ever need,
K * (ceil(max_len / block size) + 1) (K rows, each at most ceil(max_len / block size) blocks,
one more for a copy-on-write in flight). That many are reserved until it leaves, so a running
search never finds the pool empty; cached prefixes give their blocks back when a reservation
needs them. A sentence that does not fit yet is passed over by those behind it that do, for
up to `PASS_OVER_SECONDS` of the queue head's wait (a request at beam 32 forced to its longest
output had held every later client back for minutes); after that the queue is served in
order, so that a long sentence is not starved by short ones. A request's sentences are queued in
turns with those of the requests already waiting (`enqueue`): its k-th sentence after the k-th
of each of theirs, so that a request of 256 sentences at the largest beam and length delays a
later one-sentence request by about one of its sentences, not by all of them. A `solo`
sentence (one decoded again after a failed step, see engine.py) joins only an empty batch,
and nothing joins while it runs.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from transformer_mt.inference.languages import Direction
from transformer_mt.serve.contract import QueueFull, RequestTooLarge
from transformer_mt.serve.engine.paged import BlockPool
from transformer_mt.serve.engine.prefix_cache import PrefixTree
from transformer_mt.serve.engine.scheduler import Sentence, source_positions

if TYPE_CHECKING:  # a job is only carried here
    from transformer_mt.serve.engine.job import Job

# How long the head of the queue may be passed over by sentences behind it that fit.
PASS_OVER_SECONDS = 30.0


@dataclass
class Work:
    """A queued or running sentence and where its answer goes."""

    sentence: Sentence
    job: Job
    index: int  # of its sentence in the request (Job.split.sentences)
    cache_key: tuple  # of the translation cache
    direction: Direction  # its language tags, taken off its output
    streamed: str = ""  # greedy text sent so far
    solo: bool = False  # decoded alone: no other sentence in the batch while it runs

    def restart(self, solo: bool) -> None:
        """Make a sentence taken out of a failed batch ready to be admitted again."""
        sentence = self.sentence
        sentence.reused, sentence.prefix_log_probs = None, []
        self.solo = solo


class Admission:
    """The queue, the running sentences and their reservations. Not thread-safe: the engine
    calls it with its lock held."""

    def __init__(
        self, pool: BlockPool, prefixes: PrefixTree, max_batch_tokens: int, max_queue: int
    ):
        self.pool = pool
        self.prefixes = prefixes
        self.max_batch_tokens = max_batch_tokens
        self.max_queue = max_queue
        self.queue: deque[Work] = deque()
        self.running: dict[int, Work] = {}  # by sentence key
        self.reserved = 0

    @property
    def idle(self) -> bool:
        return not self.queue and not self.running

    def enqueue(self, work: list[Work]) -> None:
        """Queue the sentences of one request in turns with the queued ones (see the module).
        A queued sentence's turn is its rank among its own request's queued sentences (0 for
        the first); the new request's k-th sentence (from 0) goes after the last queued
        sentence of turn k or less, so the head of the queue is never overtaken."""
        if len(self.queue) + len(work) > self.max_queue:
            raise QueueFull(
                f"the queue holds {len(self.queue)} of {self.max_queue} sentences", retry_after=1.0
            )
        turns: Counter = Counter()  # queued sentences seen of each request, by its job's id
        last_in_turn: list[int] = []  # the index of the last queued sentence of each turn
        for i, queued in enumerate(self.queue):
            turn = turns[id(queued.job)]
            turns[id(queued.job)] += 1
            if turn == len(last_in_turn):  # a request's turns come one after another
                last_in_turn.append(i)
            else:
                last_in_turn[turn] = i
        after = list(itertools.accumulate(last_in_turn, max))  # of turns 0..k: nondecreasing
        merged, k = [], 0
        for i, queued in enumerate(self.queue):
            merged.append(queued)
            while k < len(work) and k < len(after) and after[k] == i:
                merged.append(work[k])
                k += 1
        self.queue = deque([*merged, *work[k:]])

    def admit(self) -> tuple[list[Work], list[tuple[Work, RequestTooLarge]]]:
        """Queued sentences that fit the budgets, in queue order (passing over those that do
        not, while `_may_pass_over` allows); and those that never could (more blocks than the
        whole pool), refused."""
        admitted, refused = [], []
        if self._solo_running():
            return admitted, refused
        tokens = sum(source_positions(w.sentence.src_ids) for w in self.running.values())
        passing = self._may_pass_over()
        passed: list[Work] = []
        while self.queue:
            work = self.queue.popleft()
            blocks = self.blocks_needed(work.sentence)
            size = source_positions(work.sentence.src_ids)
            if self.running or admitted:
                if work.solo:  # it waits for an empty batch, and nothing passes it
                    passed.append(work)
                    break
                if not (tokens + size <= self.max_batch_tokens and self._reserve(blocks)):
                    passed.append(work)
                    if passing and tokens < self.max_batch_tokens:  # else none behind fits
                        continue
                    break
            elif not self._reserve(blocks):
                message = (
                    f"a sentence needing {blocks} KV blocks; the pool has {self.pool.n_blocks}"
                )
                refused.append((work, RequestTooLarge(message)))
                continue
            if work.job.queue_seconds is None:
                work.job.queue_seconds = time.monotonic() - work.job.submitted
            work.sentence.reserved_blocks = blocks
            tokens += size
            self.running[work.sentence.key] = work
            admitted.append(work)
            if work.solo:
                break
        self.queue.extendleft(reversed(passed))
        return admitted, refused

    def _may_pass_over(self) -> bool:
        """Whether a sentence may join ahead of a queued one that does not fit yet: while
        the head of the queue has waited less than `PASS_OVER_SECONDS`. A sentence that
        asks for much (a wide beam forced to the longest output reserves half the pool)
        then holds back only itself; one passed over that long is served next, before any
        sentence behind it, so that short ones do not starve it."""
        if not self.queue:
            return False
        return time.monotonic() - self.queue[0].job.submitted < PASS_OVER_SECONDS

    def blocks_needed(self, sentence: Sentence) -> int:
        return sentence.decode.beam_size * (math.ceil(sentence.max_len / self.pool.block_size) + 1)

    def release(self, work: Work) -> None:
        """A running sentence left (finished, cancelled or failed): its reservation ends."""
        if self.running.pop(work.sentence.key, None) is not None:
            self.reserved -= work.sentence.reserved_blocks
            work.sentence.reserved_blocks = 0

    def drop_queued(self, jobs: set) -> None:
        """Take the queued sentences of `jobs` out of the queue."""
        self.queue = deque(w for w in self.queue if w.job not in jobs)

    def requeue(self, work: list[Work]) -> None:
        """Put sentences taken out of the batch back at the front of the queue, in order
        (beyond `max_queue`: they were admitted once)."""
        self.queue.extendleft(reversed(work))

    def _solo_running(self) -> bool:
        return len(self.running) == 1 and next(iter(self.running.values())).solo

    def _reserve(self, blocks: int) -> bool:
        """Reserve `blocks`, evicting cached prefixes if they must make room; False: no room,
        and the cache kept where evicting all of it would not make enough (a sentence passed
        over while others run would empty it at every step)."""
        if self.reserved + blocks > self.pool.n_blocks:
            return False
        while self.reserved + self.prefixes.blocks_held + blocks > self.pool.n_blocks:
            if not self.prefixes.evict():
                return False
        self.reserved += blocks
        return True
