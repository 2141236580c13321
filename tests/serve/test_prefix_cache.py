"""The prefix trie over a block pool: the longest cached start of a prefix, its blocks and
log-probabilities; references held and given back; eviction by recency and bound."""

from __future__ import annotations

from transformer_mt.serve.engine.paged import BlockPool
from transformer_mt.serve.engine.prefix_cache import PrefixTree

SOURCE, OTHER = (5, 6, 3), (7, 3)


def pool(n_blocks: int = 16) -> BlockPool:
    return BlockPool(n_blocks, 2, 1, 1, 2)  # block size 2


def test_lookup_finds_the_longest_cached_start_with_its_blocks():
    blocks = pool()
    table = [blocks.allocate() for _ in range(3)]  # positions 0-1, 2-3, 4-5
    tree = PrefixTree(blocks, capacity=4)
    tree.insert(SOURCE, [10, 11, 12, 13, 14], [-1.0, -2.0, -3.0, -4.0, -5.0], table)
    assert [blocks.refs[b] for b in table] == [2, 2, 2]  # the row's and the trie's
    match = tree.lookup(SOURCE, [10, 11, 12, 99])
    assert (match.length, match.table, match.log_probs) == (3, table[:2], [-1.0, -2.0, -3.0])
    assert tree.lookup(SOURCE, [99]) is None and tree.lookup(OTHER, [10]) is None
    assert (tree.hits, tree.misses, tree.reused_tokens) == (1, 2, 3)


def test_a_branch_after_copy_on_write_reads_its_own_block():
    blocks = pool()
    first = [blocks.allocate(), blocks.allocate()]
    tree = PrefixTree(blocks, capacity=4)
    tree.insert(SOURCE, [10, 11, 12], [-1.0, -2.0, -3.0], first)
    # A second row shared block 0, then wrote token 21 at position 2 into its own copy.
    second = [first[0], blocks.allocate()]
    tree.insert(SOURCE, [10, 11, 21, 22], [-1.0, -2.0, -2.5, -2.7], second)
    assert tree.lookup(SOURCE, [10, 11, 21, 22]).table == second
    assert tree.lookup(SOURCE, [10, 11, 12]).table == first
    assert tree.blocks_held == 3


def test_eviction_gives_every_block_back_least_recent_source_first():
    blocks = pool()
    tree = PrefixTree(blocks, capacity=2)
    tables = {}
    for source in (SOURCE, OTHER, (8, 3)):
        tables[source] = [blocks.allocate()]
        tree.insert(source, [10], [-1.0], tables[source])
        blocks.release(tables[source][0])  # the row that decided it has left
        tree.lookup(SOURCE, [10])  # keeps SOURCE the most recent
    assert len(tree) == 2 and tree.lookup(OTHER, [10]) is None  # OTHER was evicted
    assert blocks.refs[tables[OTHER][0]] == 0
    while tree.evict():
        pass
    assert blocks.n_free == blocks.n_blocks and tree.blocks_held == 0
