"""Admission: first come first served within the source-token and KV-block budgets, each
sentence's worst case reserved until it leaves, cached prefixes evicted for room."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from transformer_mt.config import DecodeConfig
from transformer_mt.inference.languages import Direction
from transformer_mt.serve.contract import QueueFull
from transformer_mt.serve.engine import admission as admission_module
from transformer_mt.serve.engine.admission import Admission, Work
from transformer_mt.serve.engine.paged import BlockPool
from transformer_mt.serve.engine.prefix_cache import PrefixTree
from transformer_mt.serve.engine.scheduler import Sentence


def work(key: int, n_tokens: int, max_len: int, beam: int = 2) -> Work:
    """A sentence of `n_tokens` source positions, its EOS included."""
    sentence = Sentence(key, [4] * (n_tokens - 1), DecodeConfig(beam_size=beam), max_len, [])
    job = SimpleNamespace(queue_seconds=None, submitted=time.monotonic())
    return Work(sentence, job, 0, (key,), Direction(None, None))


def admission(n_blocks: int = 40, max_batch_tokens: int = 20, max_queue: int = 8):
    pool = BlockPool(n_blocks, 4, 1, 1, 2)  # block size 4
    return Admission(pool, PrefixTree(pool, 8), max_batch_tokens, max_queue)


def test_a_sentence_that_does_not_fit_is_passed_over_and_one_that_never_can_is_refused():
    gate = admission(n_blocks=20)
    # Reservations: 2 beams x (ceil(max_len / 4) + 1): 6 blocks at max_len 8, 22 at 40.
    first, long, short = work(1, 6, 8), work(2, 6, 40), work(3, 2, 8)
    gate.enqueue([first, long, short])
    assert gate.admit() == ([first, short], [])  # long needs 22 of the 14 left: short passes
    assert gate.reserved == 12 and list(gate.queue) == [long]
    assert first.job.queue_seconds is not None and long.job.queue_seconds is None
    gate.release(first)
    gate.release(short)
    admitted, refused = gate.admit()  # alone, long could never fit the pool: refused
    assert admitted == [] and [(w, type(e).__name__) for w, e in refused] == [
        (long, "RequestTooLarge")
    ]
    assert "22 KV blocks; the pool has 20" in str(refused[0][1])
    assert gate.reserved == 0 and gate.idle


def test_a_head_passed_over_for_long_is_served_before_those_behind_it(monkeypatch):
    """Passing over stops once the head has waited PASS_OVER_SECONDS, so that a stream of short
    sentences does not starve a long one."""
    gate = admission(n_blocks=20)
    first, wide, short = work(1, 6, 8), work(2, 6, 32), work(3, 2, 8)  # 6, 18, 6 blocks
    gate.enqueue([first, wide, short])
    assert gate.admit() == ([first, short], [])  # wide waits for 18 of the 8 left
    gate.release(short)
    gate.enqueue([short])
    wide.job.submitted -= admission_module.PASS_OVER_SECONDS
    assert gate.admit() == ([], [])  # short would fit, but wide has waited long enough
    assert list(gate.queue) == [wide, short]
    gate.release(first)
    assert gate.admit() == ([wide], [])  # and short waits until wide's blocks come back
    assert list(gate.queue) == [short]


def test_the_source_token_budget_and_the_queue_bound():
    gate = admission(n_blocks=100, max_batch_tokens=10, max_queue=3)
    a, b = work(1, 6, 8), work(2, 6, 8)
    gate.enqueue([a, b])
    assert gate.admit() == ([a], [])  # 6 + 6 source tokens > 10
    gate.release(a)
    assert gate.admit() == ([b], [])
    with pytest.raises(QueueFull, match="0 of 3"):
        gate.enqueue([work(k, 1, 8) for k in range(3, 7)])


def test_cached_prefixes_give_their_blocks_back_for_a_reservation():
    gate = admission(n_blocks=20)
    held = [gate.pool.allocate() for _ in range(10)]
    gate.prefixes.insert((5, 3), list(range(10, 50)), [-1.0] * 40, held)
    for block in held:
        gate.pool.release(block)  # the row that decided them has left
    assert gate.prefixes.blocks_held == 10
    first, second = work(1, 2, 8), work(2, 2, 8)
    gate.enqueue([first, second])
    assert gate.admit() == ([first, second], [])  # 6 + 10 + 6 > 20: the trie went
    assert gate.prefixes.blocks_held == 0 and gate.pool.n_free == 20


def test_a_sentence_that_cannot_fit_yet_leaves_the_cached_prefixes_alone():
    gate = admission(n_blocks=20)
    held = [gate.pool.allocate() for _ in range(4)]
    gate.prefixes.insert((5, 3), list(range(10, 26)), [-1.0] * 16, held)
    for block in held:
        gate.pool.release(block)
    first, wide = work(1, 2, 8), work(2, 2, 32)  # 6 and 18 blocks: 24 > 20 with no cache
    gate.enqueue([first, wide])
    assert gate.admit() == ([first], [])
    assert gate.prefixes.blocks_held == 4  # evicting it would not have made room


def test_requests_are_queued_in_turns_and_the_head_keeps_its_place():
    gate = admission(n_blocks=100, max_queue=20)
    many = [work(k, 2, 8) for k in range(1, 5)]
    for sentence in many[1:]:
        sentence.job = many[0].job  # one request of four sentences
    gate.enqueue(many)
    one = work(5, 2, 8)
    gate.enqueue([one])  # after the head, not after all four
    assert list(gate.queue) == [many[0], one, *many[1:]]
    two = [work(6, 2, 8), work(7, 2, 8)]
    two[1].job = two[0].job
    gate.enqueue(two)  # its first after the first turn, its second after the second
    assert list(gate.queue) == [many[0], one, two[0], many[1], two[1], many[2], many[3]]
    late = [work(k, 2, 8) for k in (8, 9, 10, 11, 12)]
    for sentence in late[1:]:
        sentence.job = late[0].job
    gate.enqueue(late)  # turns beyond every other request's go to the end
    assert list(gate.queue) == [
        many[0], one, two[0], late[0], many[1], two[1], late[1], many[2], late[2], many[3],
        *late[3:],
    ]  # fmt: skip
