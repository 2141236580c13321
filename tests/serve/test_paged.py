"""The paged KV cache against the dense one: same log-probs at every step, through beam forks,
copy-on-write and frees; a fork's write never changes the blocks its sibling reads."""

from __future__ import annotations

import functools

import pytest
import torch

from transformer_mt.config import DecodeConfig, ModelConfig
from transformer_mt.model import build_model
from transformer_mt.search import SearchOptions, beam_search
from transformer_mt.serve.engine.paged import BlockPool, PagedDecoderCache, PoolExhausted

VOCAB = 40
ONE_SOURCE = torch.zeros(1, dtype=torch.long)  # a row reading source 0


def tiny_model(positions: str = "sinusoidal", kv_heads: int | None = None, **options):
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=32,
        n_heads=4,
        n_kv_heads=kv_heads,
        n_layers=2,
        d_ff=64,
        max_positions=64,
        positions=positions,
        dropout=0.0,
        **options,
    )
    return build_model(cfg, VOCAB).eval()


def pool_for(model, n_blocks: int = 64, block_size: int = 4) -> BlockPool:
    return BlockPool.for_model(model.cfg, n_blocks, block_size)


def sources(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 9, (n,), generator=g)
    src = torch.zeros(n, int(lengths.max()), dtype=torch.long)
    for i, length in enumerate(lengths.tolist()):
        src[i, :length] = torch.randint(4, VOCAB, (length,), generator=g)
    return src, src != 0


@pytest.mark.parametrize(
    "positions, kv_heads, block_size, group_rows, options",
    [
        ("sinusoidal", None, 4, 0, {}),
        ("rope", 2, 4, 0, {}),
        ("rope", 2, 1, 0, {}),
        ("sinusoidal", None, 1, 2, {}),
        # Relative terms with every row at its own position (distances clipped at 4 and
        # bucketed at 8 so that rows past them are exercised).
        ("t5", None, 4, 0, {"relative_buckets": 8, "relative_max_distance": 12}),
        ("alibi", 2, 4, 0, {}),
        ("shaw", None, 4, 0, {"max_relative_position": 4, "relative_values": True}),
        ("rope", None, 4, 0, {"attention": "mla", "mla_kv_rank": 12, "mla_rope_dim": 4}),
        ("sinusoidal", None, 1, 0, {"attention": "mla", "mla_kv_rank": 12}),
    ],
)
def test_paged_equals_dense_under_random_forks(
    positions, kv_heads, block_size, group_rows, options
):
    model = tiny_model(positions, kv_heads, **options)
    src, keep = sources(6)
    mask = keep[:, None, None, :]
    memory = model.encode(src, mask)
    pool = pool_for(model, n_blocks=128, block_size=block_size)
    dense = model.decoder.new_cache()
    paged = PagedDecoderCache(pool, model.cfg.decoder_layers, group_rows=group_rows)
    g = torch.Generator().manual_seed(1)
    tokens = torch.full((6,), 2)
    rows_source = torch.arange(6)  # the source each row reads
    with torch.inference_mode():
        for _ in range(14):  # past several block boundaries (block size 4)
            dense_lp, dense = model.decode_step(tokens, memory, mask, rows_source, dense)
            paged_lp, paged = model.decode_step(tokens, memory, mask, rows_source, paged)
            torch.testing.assert_close(paged_lp, dense_lp, atol=1e-5, rtol=0)
            # Forks: some rows picked twice, some dropped (their blocks freed).
            picks = torch.randint(0, tokens.numel(), (6,), generator=g).sort().values
            dense, paged = dense.reorder(picks), paged.reorder(picks)
            rows_source = rows_source[picks]
            tokens = torch.randint(4, VOCAB, (6,), generator=g)
            assert pool.n_used <= paged.blocks_in_use().numel()
    paged.release_all()
    assert pool.n_free == pool.n_blocks and set(pool.refs.tolist()) == {0}


def one_row_decoded(tokens: tuple[int, ...]):
    """A tiny model, one source, and a paged cache (block size 4) after decoding `tokens`."""
    model = tiny_model()
    src, keep = sources(1)
    mask = keep[:, None, None, :]
    memory = model.encode(src, mask)
    pool = pool_for(model, block_size=4)
    paged = PagedDecoderCache(pool, model.cfg.decoder_layers)
    with torch.inference_mode():
        for token in tokens:
            _, paged = model.decode_step(torch.tensor([token]), memory, mask, ONE_SOURCE, paged)
    return model, memory, mask, pool, paged


def test_a_forks_write_leaves_its_siblings_blocks_alone():
    # three positions: the first block is partly full
    model, memory, mask, pool, paged = one_row_decoded((2, 5, 6))
    with torch.inference_mode():
        paged.reorder(torch.tensor([0, 0]))  # two children share the partial block
        shared = paged.table(0)[0]
        assert paged.table(1)[0] == shared and pool.refs[shared] == 2
        before = pool.keys[:, shared].clone(), pool.values[:, shared].clone()
        _, paged = model.decode_step(
            torch.tensor([7, 8]), memory, mask, ONE_SOURCE.expand(2), paged
        )
    # One child wrote into a private copy; the other then owned the original alone.
    assert paged.table(0)[0] != paged.table(1)[0]
    original = [paged.table(row)[0] for row in (0, 1)].index(shared)
    copy = paged.table(1 - original)[0]
    torch.testing.assert_close(pool.keys[:, copy, :3], before[0][:, :3])  # copied, then written
    assert not torch.equal(pool.keys[:, copy, 3], pool.keys[:, shared, 3])  # own 4th position
    assert torch.equal(pool.keys[:, shared, :3], before[0][:, :3])
    assert torch.equal(pool.values[:, shared, :3], before[1][:, :3])


@pytest.mark.parametrize("beam_size", [1, 5])
def test_beam_search_through_the_paged_cache_equals_the_dense_one(beam_size):
    model = tiny_model()
    src, keep = sources(5, seed=3)
    mask = keep[:, None, None, :]
    cfg = DecodeConfig(beam_size=beam_size, n_best=beam_size, max_len_a=1.0, max_len_b=6)
    pool = pool_for(model, n_blocks=400)
    new_cache = functools.partial(PagedDecoderCache, pool, model.cfg.decoder_layers)
    dense = beam_search(model, src, mask, cfg)
    paged = beam_search(model, src, mask, cfg, SearchOptions(new_cache=new_cache))
    for a, b in zip(dense, paged, strict=True):
        assert [h.tokens for h in a.hypotheses] == [h.tokens for h in b.hypotheses]
        assert [h.score for h in a.hypotheses] == pytest.approx([h.score for h in b.hypotheses])


def test_rows_copy_a_block_that_a_reader_outside_the_batch_holds():
    """The prefix cache holds a reference to a partial block two rows write into: both rows
    copy it, and the block keeps what it held."""
    model, memory, mask, pool, paged = one_row_decoded((2, 5))
    with torch.inference_mode():
        held = paged.table(0)[0]
        pool.share(held)  # as a prefix-cache node does
        before = pool.keys[:, held].clone()
        paged.reorder(torch.tensor([0, 0]))
        _, paged = model.decode_step(
            torch.tensor([7, 8]), memory, mask, ONE_SOURCE.expand(2), paged
        )
    firsts = {paged.table(0)[0], paged.table(1)[0]}
    assert held not in firsts and len(firsts) == 2 and pool.refs[held] == 1
    assert torch.equal(pool.keys[:, held], before)
    for block in firsts:
        torch.testing.assert_close(pool.keys[:, block, :2], before[:, :2])
    paged.release_all()
    pool.release(held)
    assert pool.n_free == pool.n_blocks


def test_an_empty_pool_refuses_by_name():
    pool = BlockPool(1, 4, 1, 1, 2)
    pool.allocate()
    with pytest.raises(PoolExhausted, match="all 1 KV blocks"):
        pool.allocate()


def test_a_latent_pool_holds_one_latent_per_position():
    """Latent attention's pool: no values, a block's bytes are its latents' (r + d_R numbers
    per position and layer)."""
    model = tiny_model("rope", attention="mla", mla_kv_rank=12, mla_rope_dim=4)
    pool = pool_for(model, n_blocks=8, block_size=4)
    assert pool.values is None
    layers = model.cfg.decoder_layers
    assert pool.block_bytes == 4 * layers * (12 + 4) * 4  # bs x layers x (r + d_R) x float32
    assert pool.block_bytes == 4 * model.cfg.self_attention_cache_bytes()  # 4 positions
