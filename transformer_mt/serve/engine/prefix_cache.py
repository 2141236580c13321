"""Decoder KV blocks of forced target prefixes, reused by later requests (after SGLang's
RadixAttention, Zheng et al. 2024, adapted to an encoder-decoder).

The encoder is bidirectional, so a source prefix says nothing about a longer source; but for
one whole source (the key: its ids, within the scope of who sent it, `Sentence.cache_source`),
the decoder's keys and values at position p depend only on the target tokens before p. So per
source a trie over target tokens maps each forced prefix to the KV blocks that hold its
positions and its cumulative log-probability. A request for the same source whose forced prefix
extends, or repeats, an earlier one (interactive translation: the user typed more words) starts
its search after the longest cached part instead of recomputing it. The trie holds one
reference to every block it uses (the pool frees a block only when no row and no trie uses it)
and whole sources are evicted, least recently used first, when it holds more than `capacity`
sources or when admission needs their blocks.

Node at depth d: target tokens y_1..y_d were decided from decoder positions 0..d-1 (inputs
BOS, y_1..y_{d-1}); it keeps the block holding position d-1 and log P(y_1..y_d).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from transformer_mt.serve.engine.paged import BlockPool


@dataclass
class _Node:
    block: int
    log_prob: float
    children: dict[int, _Node] = field(default_factory=dict)


@dataclass
class _Tree:
    root: dict[int, _Node] = field(default_factory=dict)
    blocks: Counter = field(default_factory=Counter)  # block -> nodes that use it


@dataclass(frozen=True)
class PrefixMatch:
    """The cached start of a forced prefix: its first `length` tokens."""

    length: int
    table: list[int]  # blocks holding positions 0 .. length-1
    log_probs: list[float]  # log P(y_1..y_d) for d = 1 .. length


class PrefixTree:
    """Per-source tries of forced target prefixes over a `BlockPool` (module docstring)."""

    def __init__(self, pool: BlockPool, capacity: int):
        self.pool = pool
        self.capacity = capacity
        self.hits = 0  # lookups that reused at least one position
        self.misses = 0
        self.reused_tokens = 0
        self._trees: OrderedDict[Hashable, _Tree] = OrderedDict()

    def __len__(self) -> int:
        return len(self._trees)

    @property
    def blocks_held(self) -> int:
        return sum(len(tree.blocks) for tree in self._trees.values())

    def lookup(self, source: Hashable, prefix: Sequence[int]) -> PrefixMatch | None:
        """The longest cached start of `prefix` for `source`, or None."""
        tree = self._trees.get(source)
        path: list[_Node] = []
        children = tree.root if tree is not None else {}
        for token in prefix:
            node = children.get(token)
            if node is None:
                break
            path.append(node)
            children = node.children
        if not path:
            self.misses += 1
            return None
        self._trees.move_to_end(source)
        self.hits += 1
        self.reused_tokens += len(path)
        size = self.pool.block_size
        # Block i holds positions i*size .. (i+1)*size - 1; the deepest node inside it has it
        # written up to its own position (a copy-on-write child holds the earlier ones too).
        table = [path[min(len(path), (i + 1) * size) - 1].block for i in range(_blocks(path, size))]
        return PrefixMatch(len(path), table, [n.log_prob for n in path])

    def insert(
        self,
        source: Hashable,
        tokens: Sequence[int],
        log_probs: Sequence[float],
        table: Sequence[int],
    ) -> None:
        """Remember that a row with block table `table` decided `tokens` with cumulative
        `log_probs` (one per token); nodes already there keep their blocks."""
        if self.capacity <= 0 or not tokens:
            return
        tree = self._trees.get(source)
        if tree is None:
            tree = self._trees[source] = _Tree()
        self._trees.move_to_end(source)
        children = tree.root
        for depth, (token, log_prob) in enumerate(zip(tokens, log_probs, strict=True), 1):
            node = children.get(token)
            if node is None:
                block = table[(depth - 1) // self.pool.block_size]
                node = children[token] = _Node(block, log_prob)
                if tree.blocks[block] == 0:
                    self.pool.share(block)
                tree.blocks[block] += 1
            children = node.children
        while len(self._trees) > self.capacity:
            self.evict()

    def evict(self) -> bool:
        """Drop the least recently used source's trie; False when there is none."""
        if not self._trees:
            return False
        _, tree = self._trees.popitem(last=False)
        for block in tree.blocks:
            self.pool.release(block)
        return True


def _blocks(path: list[_Node], size: int) -> int:
    return (len(path) + size - 1) // size
