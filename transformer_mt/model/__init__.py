"""The Transformer encoder-decoder: attention -> layers -> encoder/decoder -> seq2seq."""

from transformer_mt.model.attention import MultiHeadAttention, causal_mask, padding_mask
from transformer_mt.model.kv_cache import KVCache
from transformer_mt.model.latent import LatentAttention
from transformer_mt.model.layers import DecoderLayer, EncoderLayer, FeedForward, LayerCache
from transformer_mt.model.output_subset import OutputSubset
from transformer_mt.model.patterns import AttentionPattern
from transformer_mt.model.rope import RotaryEmbedding
from transformer_mt.model.transformer import (
    AttentionMaps,
    DecoderCache,
    Seq2SeqTransformer,
    build_model,
)

__all__ = [
    "AttentionMaps",
    "AttentionPattern",
    "DecoderCache",
    "DecoderLayer",
    "EncoderLayer",
    "FeedForward",
    "KVCache",
    "LatentAttention",
    "LayerCache",
    "MultiHeadAttention",
    "OutputSubset",
    "RotaryEmbedding",
    "Seq2SeqTransformer",
    "build_model",
    "causal_mask",
    "padding_mask",
]
