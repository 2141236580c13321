"""Encoder, decoder and the encoder-decoder model (Vaswani et al. 2017, section 3.1).

The model knows nothing of beams or files: search drives it through `encode` and
`decode_step`, passing an explicit `DecoderCache` that it owns.

Shapes: B batch, S source length, T target length, D d_model, V vocabulary.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from transformer_mt.config import ModelConfig
from transformer_mt.model.attention import AttentionKernel, attention, causal_mask, padding_mask
from transformer_mt.model.embeddings import Embedder, build_positions
from transformer_mt.model.layers import DecoderLayer, EncoderLayer, LayerCache, SourceRows
from transformer_mt.model.output_subset import OutputSubset
from transformer_mt.model.patterns import AttentionPattern
from transformer_mt.model.relative import build_position_bias


@dataclass
class DecoderCache:
    """Incremental-decoding state of the whole decoder, one `LayerCache` per layer.

    Self-attention keys and values are held per batch row; cross-attention keys and values
    per source, computed once from the memory of the first step. Which source a row reads is
    the decoding step's `sources` argument, which the caller keeps aligned with the rows: a
    beam reorder reorders that index and leaves the cross-attention keys alone.
    """

    layers: list[LayerCache] = field(default_factory=list)

    @property
    def length(self) -> int | Tensor:
        """Target tokens decoded so far: the position offset of the next token."""
        first = self.layers[0].self_attn if self.layers else None
        return 0 if first is None else first.length

    def reorder(self, indices: Tensor, sources: Tensor | None = None) -> DecoderCache:
        """Keep batch rows `indices` (B',) long, in that order (a row may be repeated: beam
        search's first step decodes one row per sentence and repeats it for each beam), and,
        when given, the cross-attention sources `sources` (N',) long (None: every source, in
        place); returns self."""
        for layer in self.layers:
            layer.reorder(indices, sources)
        return self


def _pattern(cfg: ModelConfig) -> AttentionPattern:
    return AttentionPattern(cfg.attention_pattern, cfg.attention_window, cfg.attention_dilation)


@dataclass
class AttentionMaps:
    """Attention weights of every layer from the plain-math path (`attention_maps`)."""

    encoder: list[Tensor]  # per encoder layer (B, H, S, S)
    decoder: list[Tensor]  # per decoder layer, self-attention (B, H, T, T)
    cross: list[Tensor]  # per decoder layer, cross-attention (B, H, T, S)


class _LayerStack(nn.Module):
    """What encoder and decoder are both made of: embedding, a stack of layers, and with
    pre-norm a final LayerNorm (pre-norm leaves the residual stream un-normalised); with t5
    or alibi positions, the self-attention bias its layers share (model/relative.py).
    `pad_id` tokens get no position with sinusoidal_fairseq positions, as in fairseq."""

    def __init__(
        self,
        cfg: ModelConfig,
        token_embedding: nn.Embedding,
        layer: Callable[[ModelConfig], nn.Module],
        n_layers: int,
        causal: bool,
        pad_id: int,
    ):
        super().__init__()
        # Built in this order, which the random initial weights depend on.
        positions = build_positions(cfg)
        # fairseq's positions give pad tokens none (a zero vector), as M2M100's do.
        pad_without_position = pad_id if cfg.positions == "sinusoidal_fairseq" else None
        self.embed = Embedder(
            token_embedding, positions, cfg.dropout, cfg.scale_embeddings, pad_without_position
        )
        self.pattern = _pattern(cfg)
        self.flex = cfg.attention_backend == "flex"
        self.layers = nn.ModuleList(layer(cfg) for _ in range(n_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model, cfg.layer_norm_eps) if cfg.pre_norm else None
        self.position_bias = build_position_bias(cfg, causal)

    def normed(self, x: Tensor) -> Tensor:
        """The last layer's output, through the final LayerNorm when there is one."""
        return x if self.final_norm is None else self.final_norm(x)

    def self_bias(self, n_queries: int, offset: int | Tensor = 0) -> Tensor | None:
        """(H, Tq, offset + Tq) self-attention bias of queries at offset.. (t5, alibi), or
        None: computed once per pass, shared by every layer."""
        return None if self.position_bias is None else self.position_bias(n_queries, offset)


class Encoder(_LayerStack):
    """Reads the whole source at once: every position attends to every real source token
    (or those a sparse pattern keeps), so the source is encoded once per sentence and then
    only read (`memory`) by the decoder's cross-attention."""

    def __init__(
        self,
        cfg: ModelConfig,
        token_embedding: nn.Embedding,
        kernel: AttentionKernel,
        pad_id: int,
    ):
        layer = functools.partial(EncoderLayer, kernel=kernel)
        super().__init__(cfg, token_embedding, layer, cfg.n_layers, causal=False, pad_id=pad_id)

    def forward(self, src_ids: Tensor, src_mask: Tensor) -> Tensor:
        """src_ids (B, S), src_mask (B, 1, 1, S) True = real token -> memory (B, S, D)."""
        x = self.embed(src_ids)
        if self.flex:
            n = src_mask.size(-1)
            mask = self.pattern.block_mask(n, n, key_keep=src_mask[:, 0, 0, :])
        else:
            mask = self.self_mask(src_mask)
        bias = self.self_bias(src_ids.size(1))
        for layer in self.layers:
            x = layer(x, mask, bias)
        return self.normed(x)

    def forward_with_weights(self, src_ids: Tensor, src_mask: Tensor) -> tuple[Tensor, list]:
        """`forward` through plain-math attention: memory (B, S, D), per layer (B, H, S, S)."""
        x, mask, weights = self.embed(src_ids), self.self_mask(src_mask), []
        bias = self.self_bias(src_ids.size(1))
        for layer in self.layers:
            x, w = layer.forward_with_weights(x, mask, bias)
            weights.append(w)
        return self.normed(x), weights

    def self_mask(self, src_mask: Tensor) -> Tensor:
        """(B, 1, 1, S) padding mask -> with a sparse pattern (B, 1, S, S), else unchanged."""
        keep = self.pattern.mask(src_mask.size(-1), src_mask.size(-1), src_mask.device)
        return src_mask if keep is None else src_mask & keep


class Decoder(_LayerStack):
    """Writes the target one token after another: causal self-attention (a position sees only
    those before it, so training can teacher-force every position in one pass) and
    cross-attention to the encoder's memory. Decoding steps keep each layer's keys and
    values in a `DecoderCache`, so a step computes only the new token's rows."""

    def __init__(
        self,
        cfg: ModelConfig,
        token_embedding: nn.Embedding,
        kernel: AttentionKernel,
        pad_id: int,
    ):
        layer = functools.partial(DecoderLayer, kernel=kernel)
        super().__init__(
            cfg, token_embedding, layer, cfg.decoder_layers, causal=True, pad_id=pad_id
        )

    def forward(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: DecoderCache | None = None,
        sources: SourceRows | None = None,
    ) -> Tensor:
        """Hidden states of target positions.

        Args:
            tgt_ids: (B, T) decoder input ids (BOS first); with a cache, only the new tokens.
            memory: (B, S, D) encoder output, one row per row of tgt_ids; with a cache
                (N, S, D), one row per source, read only while the cache holds no
                cross-attention keys and values yet.
            src_mask: (B, 1, 1, S) bool, True = real source token; with a cache (N, 1, 1, S).
            cache: None for a full (teacher-forced) pass; else updated in place. Its `length`
                may be a (B,) tensor: rows at different positions (a server's batch).
            sources: with a cache, the source (row of memory) each row reads, laid out.

        Returns:
            (B, T, D).
        """
        offset = 0 if cache is None else cache.length
        if cache is not None and sources is None:
            raise ValueError("a cached decoding step needs the source of each row")
        x = self.embed(tgt_ids, offset)
        # Sparse patterns: the new queries' rows against every key, cached ones included.
        # Flex only pays for the full pass; a decoding step has one query row.
        if self.flex and cache is None:
            t = x.size(1)
            self_mask = self.pattern.block_mask(t, t, causal=True, device=x.device)
        else:
            self_mask = self.pattern.causal_mask(x.size(1), offset + x.size(1), x.device)
        bias = self.self_bias(x.size(1), offset)
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache.layers[i]
            x = layer(x, memory, src_mask, layer_cache, self_mask, bias, sources)
        return self.normed(x)

    def forward_with_weights(
        self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor
    ) -> tuple[Tensor, list, list]:
        """Uncached `forward` through plain-math attention.

        Returns:
            states (B, T, D), self-attention weights per layer (B, H, T, T) and cross-attention
            weights per layer (B, H, T, S).
        """
        x, t = self.embed(tgt_ids), tgt_ids.size(1)
        self_mask = self.pattern.causal_mask(t, t, x.device)
        if self_mask is None:
            self_mask = causal_mask(t, t, x.device)
        self_weights, cross_weights, bias = [], [], self.self_bias(t)
        for layer in self.layers:
            x, w_self, w_cross = layer.forward_with_weights(x, memory, src_mask, self_mask, bias)
            self_weights.append(w_self)
            cross_weights.append(w_cross)
        return self.normed(x), self_weights, cross_weights

    def cross_keys_values(
        self, memory: Tensor, dtype: torch.dtype | None = None
    ) -> list[tuple[Tensor, Tensor]]:
        """Cross-attention keys and values of `memory` (N, S, D) for every layer, (N, Hkv, S, Dh)
        each, in `dtype` (None: as computed): what a cache holds for one row per source."""
        store = LayerCache(dtype=dtype).stored_cross
        return [store(*layer.cross_attn.project_kv(memory)) for layer in self.layers]

    def new_cache(self, dtype: torch.dtype | None = None) -> DecoderCache:
        """An empty cache; `dtype` stores keys and values in that type (None: the type they
        are computed in)."""
        return DecoderCache([LayerCache(dtype=dtype) for _ in self.layers])


class Seq2SeqTransformer(nn.Module):
    """The encoder-decoder Transformer with an output projection over the target vocabulary.

    Every attention layer computes its attention through `kernel` (`AttentionKernel`): the
    model's own `attention` (SDPA) by default; transformer_mt/kernels.py offers CPU kernels.
    The kernel holds no weights: the state_dict is the same whichever runs.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int,
        kernel: AttentionKernel = attention,
    ):
        super().__init__()
        if cfg.share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(
                "model.share_embeddings needs one vocabulary, got source "
                f"{src_vocab_size} and target {tgt_vocab_size}"
            )
        self.cfg = cfg
        self.pad_id = pad_id
        src_embedding = nn.Embedding(src_vocab_size, cfg.d_model)
        tgt_embedding = (
            src_embedding if cfg.share_embeddings else nn.Embedding(tgt_vocab_size, cfg.d_model)
        )
        self.encoder = Encoder(cfg, src_embedding, kernel, pad_id)
        self.decoder = Decoder(cfg, tgt_embedding, kernel, pad_id)
        # With output_bias, the bias is the projection's own (its weight may be tied).
        self.output_projection = nn.Linear(cfg.d_model, tgt_vocab_size, bias=cfg.output_bias)
        self.reset_parameters()
        if cfg.tie_output:
            self.output_projection.weight = tgt_embedding.weight

    def reset_parameters(self) -> None:
        """Xavier-uniform linear weights and zero biases (Annotated Transformer, fairseq);
        token embeddings N(0, D^-0.5) with a zero pad row (fairseq), so that scaled by sqrt(D)
        they start at unit variance."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=self.cfg.d_model**-0.5)
                with torch.no_grad():
                    module.weight[self.pad_id].zero_()

    def src_mask(self, src_ids: Tensor) -> Tensor:
        """(B, S) -> (B, 1, 1, S) bool, True at real (non-pad) source tokens."""
        return padding_mask(src_ids, self.pad_id)

    def forward(self, src_ids: Tensor, tgt_in_ids: Tensor, src_mask: Tensor | None = None):
        """Teacher-forced logits.

        Args:
            src_ids: (B, S) source ids, right-padded with pad_id.
            tgt_in_ids: (B, T) decoder input ids (BOS + target), right-padded.
            src_mask: (B, 1, 1, S) bool, True = real token; derived from src_ids if None.

        Returns:
            logits (B, T, V).
        """
        if src_mask is None:
            src_mask = self.src_mask(src_ids)
        memory = self.encoder(src_ids, src_mask)
        return self.output_projection(self.decoder(tgt_in_ids, memory, src_mask))

    def attention_maps(
        self, src_ids: Tensor, tgt_in_ids: Tensor, src_mask: Tensor | None = None
    ) -> AttentionMaps:
        """Attention weights of every layer and head for a teacher-forced pass.

        Runs the plain-math attention (the slow twin of the SDPA path), for alignments and
        plots; training and search never call it.

        Args:
            src_ids: (B, S) source ids; tgt_in_ids: (B, T) decoder input (BOS + target).
            src_mask: (B, 1, 1, S) bool; derived from src_ids if None.
        """
        if src_mask is None:
            src_mask = self.src_mask(src_ids)
        memory, encoder = self.encoder.forward_with_weights(src_ids, src_mask)
        _, decoder, cross = self.decoder.forward_with_weights(tgt_in_ids, memory, src_mask)
        return AttentionMaps(encoder, decoder, cross)

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> Tensor:
        """src_ids (B, S), src_mask (B, 1, 1, S) -> memory (B, S, D)."""
        return self.encoder(src_ids, src_mask)

    def source_rows(self, sources: Tensor, n_sources: int) -> SourceRows:
        """The layout `decode_step` reads of rows reading sources `sources` (B,) long, each
        in [0, n_sources): computed once while the rows keep their sources."""
        return SourceRows.of(sources, n_sources)

    def decode_step(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        sources: SourceRows | Tensor,
        cache: DecoderCache | None,
        vocab: OutputSubset | None = None,
    ) -> tuple[Tensor, DecoderCache]:
        """One incremental decoding step.

        Args:
            tgt_ids: (B,) the latest token of every row (BOS on the first step).
            memory: (N, S, D) encoder output, one row per source; only read on the first step
                (its cross-attention keys/values are cached, once per source).
            src_mask: (N, 1, 1, S) bool, True = real source token.
            sources: which source (row of memory) each row reads: `source_rows`' layout of
                the (B,) long index, or the index itself (row // K for the beams of a search,
                a server's slots, arange(B) for one memory row per row), then laid out at this
                step. Callers that step many times lay it out once per change of rows: the
                layout reads the index's values, which stops `torch.compile`'s graph.
            cache: None on the first step (or an empty `decoder.new_cache(...)`, e.g. one
                storing keys and values in a narrower dtype).
            vocab: each row scores only its source's target ids (a shortlist), the others at
                -inf; None: the whole vocabulary.

        Returns:
            log_probs (B, V) float32 for the next token, and the updated cache.
        """
        if cache is None:
            cache = self.decoder.new_cache()
        if isinstance(sources, Tensor):
            sources = self.source_rows(sources, src_mask.size(0))
        hidden = self.decoder(tgt_ids[:, None], memory, src_mask, cache, sources)  # (B, 1, D)
        if vocab is not None:
            rows = sources.source_of_rows(tgt_ids.size(0), tgt_ids.device)
            return vocab.log_probs(hidden[:, -1], rows), cache
        logits = self.output_projection(hidden[:, -1]).float()  # (B, V)
        # In place unless a gradient is wanted: a second (B, V) tensor (10 MB at 320 rows of
        # 8,000) made a beam-5 step 1-2% slower (docs/results.md).
        out = None if logits.requires_grad else logits
        return torch.log_softmax(logits, dim=-1, out=out), cache


def build_model(
    cfg: ModelConfig,
    src_vocab_size: int,
    tgt_vocab_size: int | None = None,
    pad_id: int = 0,
    kernel: AttentionKernel = attention,
) -> Seq2SeqTransformer:
    """A freshly initialised model; `tgt_vocab_size` defaults to the (joint) source one.
    `kernel` computes every layer's attention (see `Seq2SeqTransformer`).

    Raises:
        ValueError: a vocabulary without room for `pad_id` (an empty one, say), which
            would otherwise fail deep inside the initialisation.
    """
    cfg.validate()
    tgt_vocab_size = src_vocab_size if tgt_vocab_size is None else tgt_vocab_size
    for name, size in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size)):
        if not 0 <= pad_id < size:
            raise ValueError(f"{name}={size}: too small for pad_id={pad_id}")
    return Seq2SeqTransformer(cfg, src_vocab_size, tgt_vocab_size, pad_id, kernel)
