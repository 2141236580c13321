"""Continuous (iteration-level) batching of beam searches over one paged decoder cache.

Every decoder step runs one batch over the live hypotheses of every admitted sentence, in
whatever step each one is (Yu et al. 2022, Orca): new sentences join between steps, finished
ones leave at once and their KV blocks go back to the pool. The search rules are search's own
(`beam_step`): sentences with the same output settings (`lane_key`) form a lane, one
`BeamState`; greedy search runs in lanes of beam size 1. A sentence's lexical constraints
travel in its lane's `BeamState` (search/constraints.py), so sentences with and without them
share a lane and a step. Encoder memory and cross-attention
keys and values are held once per source sentence, in the slots of `SourceSlots`; a decoding
step is told each row's slot (the model's `sources` argument), never given per-beam copies.

Row layout: the rows of lane 0's sentences (K_0 per sentence), then lane 1's, and so on.
Sources (cross-attention rows) sit in the slots of `SourceSlots`, in no particular order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from transformer_mt.config import DecodeConfig
from transformer_mt.model import Seq2SeqTransformer
from transformer_mt.search import Hypothesis, SpecialIds, beam_step
from transformer_mt.search.beam_state import BeamState
from transformer_mt.search.options import OWN_IDS
from transformer_mt.search.protocol import SourceVocabulary
from transformer_mt.search.rows import shortlist_needs
from transformer_mt.serve.engine.paged import BlockPool, PagedDecoderCache
from transformer_mt.serve.engine.prefix_cache import PrefixMatch, PrefixTree


@dataclass
class Sentence:
    """One source sentence of a request, as the scheduler sees it."""

    key: int  # unique while it lives
    src_ids: list[int]  # its subwords, without the EOS (`source_positions`)
    decode: DecodeConfig
    max_len: int  # max_len(x), capped at the position table
    prefix: list[int]
    # Target phrases (ids) its translations must contain (`Translator.constraint_ids`);
    # `decode.beam_size` and `max_len` already leave them room.
    constraints: list[list[int]] = field(default_factory=list)
    memory: Tensor | None = None  # (S, D) encoder output
    cross: list[tuple[Tensor, Tensor]] | None = None  # per layer (Hkv, S, Dh) keys, values
    reserved_blocks: int = 0  # KV blocks held back for it until it leaves
    reused: PrefixMatch | None = None  # the cached start of its prefix, if any
    prefix_log_probs: list[float] = field(default_factory=list)  # log P(y_1..y_d), d <= |prefix|
    scope: str | None = None  # whose cached work it may reuse (`cache_source`)

    @property
    def cache_source(self) -> tuple:
        """Its source as the engine's caches of encoder outputs and forced prefixes key it:
        its ids within its `scope` (the API key that sent it; None on a server without keys),
        so that two keys never share an entry: a hit answers faster, which would tell one key
        what another has translated."""
        return self.scope, tuple(self.src_ids)


def source_positions(src_ids: Sequence[int]) -> int:
    """Positions a source takes in the encoder, and keys it gives cross-attention: its
    subwords and the EOS that its encoder batch appends (`Translator.batches`, the one place
    that appends it)."""
    return len(src_ids) + 1


@dataclass
class Lane:
    """The sentences searched with one set of output settings (`lane_key`)."""

    decode: DecodeConfig
    state: BeamState
    sentences: list[Sentence] = field(default_factory=list)


def lane_key(decode: DecodeConfig) -> tuple:
    """Sentences share a lane (one `BeamState`, searched with one `Lane.decode`) when every
    setting that can change their translations is equal: `DecodeConfig.output_settings`, so
    that a decode field added later can never be searched with another sentence's value."""
    return decode.output_settings()


class ContinuousBatch:
    """The running sentences and their decoder state; `step` advances all of them by one token."""

    def __init__(
        self,
        model: Seq2SeqTransformer,
        pool: BlockPool,
        cache_dtype: torch.dtype | None = None,
        prefixes: PrefixTree | None = None,
        group_rows: int = 0,
        ids: SpecialIds = OWN_IDS,
        vocabulary: Callable[[Tensor, list[list[int]]], SourceVocabulary] | None = None,
    ):
        self.model = model
        # A shortlist (`SearchOptions.vocabulary`): each source's ids, asked per change of
        # sources, so that a sentence searches its own ids as in `Translator.translate`.
        self.vocabulary = vocabulary
        self._vocab: SourceVocabulary | None = None
        self.prefixes = prefixes
        self.pool = pool
        self.ids = ids
        self.device = pool.keys.device
        self.cache = PagedDecoderCache(
            pool, model.cfg.decoder_layers, cache_dtype, group_rows=group_rows
        )
        self.lanes: dict[tuple, Lane] = {}
        self.finished: dict[int, list[Hypothesis]] = defaultdict(list)
        self._sources_changed = True
        self._sources = SourceSlots()
        self._row_sources: object = None  # each row's slot, as the model reads it

    @property
    def sentences(self) -> list[Sentence]:
        return [s for lane in self.lanes.values() for s in lane.sentences]

    @property
    def n_rows(self) -> int:
        return sum(lane.state.tokens.shape[0] for lane in self.lanes.values())

    def join(self, sentences: list[Sentence]) -> None:
        """Add sentences (their `memory` and `cross` set) at the end of their lanes; one whose
        prefix starts from the prefix cache (`reused`) starts after the cached tokens."""
        old_layout = self._row_ranges()
        groups: dict[tuple, list[Sentence]] = defaultdict(list)
        for sentence in sentences:
            groups[lane_key(sentence.decode)].append(sentence)
        new_rows: dict[tuple, range] = {}
        for key, group in groups.items():
            fresh = self._start_state(group)
            lane = self.lanes.get(key)
            if lane is None:
                self.lanes[key] = Lane(group[0].decode, fresh, group)
            else:
                lane.state.extend(fresh)
                lane.sentences.extend(group)
            first, empty = self.cache.lengths.numel(), 0
            for sentence in group:
                reused = sentence.reused
                if reused is None:
                    empty += sentence.decode.beam_size  # added together, below
                    continue
                self.cache.add_rows(empty)
                self.cache.add_rows(sentence.decode.beam_size, reused.table, reused.length)
                empty = 0
            self.cache.add_rows(empty)
            new_rows[key] = range(first, self.cache.lengths.numel())
        # New rows were appended to the cache; move every row to its lane's place.
        order = []
        for key in self.lanes:
            start, stop = old_layout.get(key, (0, 0))
            order.extend([*range(start, stop), *new_rows.get(key, ())])
        self.cache.reorder(torch.tensor(order, dtype=torch.long, device=self.device))
        self._sources_changed = True

    def _start_state(self, group: list[Sentence]) -> BeamState:
        """One state for sentences of one lane, each after its cached prefix tokens, if any."""
        state = BeamState.start(
            torch.tensor([s.max_len for s in group], device=self.device),
            torch.tensor([s.key for s in group], device=self.device),
            group[0].decode.beam_size,
            [s.prefix for s in group],
            [s.constraints for s in group],
            self.ids,
        )
        reused = [(n, s) for n, s in enumerate(group) if s.reused is not None]
        if reused:
            k = state.beam_size
            state.tokens = state.tokens.new_zeros(len(group) * k, state.prefix.shape[1])
            for n, sentence in reused:
                length = sentence.reused.length
                state.tokens[n * k : (n + 1) * k, :length] = state.prefix[n, :length]
                state.steps[n] = length
                state.scores[n, 0] = sentence.reused.log_probs[-1]
                sentence.prefix_log_probs = list(sentence.reused.log_probs)
                if state.constraints is not None:  # the cached tokens count towards them
                    state.constraints.read(n, sentence.prefix[:length])
        return state

    def step(self) -> tuple[list[Sentence], dict[int, list[int]]]:
        """One decoder step for every row, then search's rules in every lane.

        Returns:
            the sentences that finished (their hypotheses in `finished[key]`), and for each
            live greedy sentence its tokens so far (to stream them).
        """
        if self._sources_changed:
            self._lay_out_sources()
        tokens = torch.cat([lane.state.last_tokens(self.ids.bos) for lane in self.lanes.values()])
        sources = self._sources
        vocab = () if self._vocab is None else (self._vocab,)
        log_probs, _ = self.model.decode_step(
            tokens, sources.memory, sources.mask, self._row_sources, self.cache, *vocab
        )
        done_sentences, rows, offset = [], [], 0
        for lane in self.lanes.values():
            n_rows = lane.state.tokens.shape[0]
            beam_rows, done = beam_step(
                lane.state,
                log_probs[offset : offset + n_rows],
                lane.decode,
                self.ids,
                self.finished,
            )
            self._record_prefixes(lane)
            keep = (~done).nonzero().squeeze(1)
            beam_size = lane.state.beam_size
            rows.append(beam_rows.view(-1, beam_size)[keep].reshape(-1) + offset)
            if bool(done.any()):
                done_sentences.extend(
                    s for s, d in zip(lane.sentences, done.tolist(), strict=True) if d
                )
                lane.sentences = [lane.sentences[i] for i in keep.tolist()]
                lane.state.keep(keep)
                self._sources_changed = True
            offset += n_rows
        self.cache.reorder(torch.cat(rows))
        self._drop_empty_lanes()
        self._cache_prefixes()
        return done_sentences, self._greedy_tokens()

    def _record_prefixes(self, lane: Lane) -> None:
        """Note log P of the forced tokens decided so far (the live beam, rank 0)."""
        forced = (lane.state.steps <= lane.state.prefix_lens).nonzero().squeeze(1).tolist()
        if forced:
            scores = lane.state.scores[:, 0].tolist()
            for n in forced:
                lane.sentences[n].prefix_log_probs.append(scores[n])

    def _cache_prefixes(self) -> None:
        """Give the prefix cache every forced prefix whose last token was just decided, with
        the blocks of the row that decided it."""
        if self.prefixes is None:
            return
        row = 0
        for lane in self.lanes.values():
            ended = lane.state.steps == lane.state.prefix_lens  # just left the forced part
            for n in (ended & (lane.state.prefix_lens > 0)).nonzero().squeeze(1).tolist():
                sentence = lane.sentences[n]
                table = self.cache.table(row + n * lane.state.beam_size)
                self.prefixes.insert(
                    sentence.cache_source, sentence.prefix, sentence.prefix_log_probs, table
                )
            row += lane.state.tokens.shape[0]

    def remove(self, keys: set[int]) -> list[Sentence]:
        """Take sentences out without finishing them (cancelled); their blocks are freed."""
        removed, rows, offset = [], [], 0
        for lane in self.lanes.values():
            n_rows = lane.state.tokens.shape[0]
            keep = [i for i, s in enumerate(lane.sentences) if s.key not in keys]
            removed.extend(s for s in lane.sentences if s.key in keys)
            kept = torch.tensor(keep, dtype=torch.long, device=self.device)
            rows.append(lane.state.keep(kept) + offset)
            lane.sentences = [lane.sentences[i] for i in keep]
            offset += n_rows
        if removed:
            self.cache.reorder(torch.cat(rows))
            self._drop_empty_lanes()
            self._sources_changed = True
            for sentence in removed:
                self.finished.pop(sentence.key, None)
        return removed

    def _row_ranges(self) -> dict[tuple, tuple[int, int]]:
        ranges, start = {}, 0
        for key, lane in self.lanes.items():
            stop = start + lane.state.tokens.shape[0]
            ranges[key] = (start, stop)
            start = stop
        return ranges

    def _drop_empty_lanes(self) -> None:
        self.lanes = {k: lane for k, lane in self.lanes.items() if lane.sentences}

    def _lay_out_sources(self) -> None:
        """Every live source in a slot of `SourceSlots`, the cache attending to them, and
        each row's slot."""
        sentences = self.sentences
        self._sources_changed = False
        self._sources.update(sentences)
        if not sentences:
            return
        self.cache.attend_sources(self._sources.attended)
        slot_of = self._sources.slot_of
        slots = [slot_of[s.key] for s in sentences for _ in range(s.decode.beam_size)]
        slots = torch.tensor(slots, dtype=torch.long, device=self.device)
        self._row_sources = self.model.source_rows(slots, self._sources.memory.size(0))
        if self.vocabulary is not None:
            self._vocab = self._slot_vocabulary(sentences)

    def _slot_vocabulary(self, sentences: list[Sentence]) -> SourceVocabulary:
        """The shortlist of every slot: its sentence's ids (an empty slot: a sentence of no
        source tokens, read by no row)."""
        n_slots = self._sources.memory.size(0)
        src, needed = [[] for _ in range(n_slots)], [[self.ids.eos] for _ in range(n_slots)]
        for sentence in sentences:
            slot = self._sources.slot_of[sentence.key]
            src[slot] = sentence.src_ids
            needed[slot] = shortlist_needs(self.ids.eos, sentence.prefix, sentence.constraints)
        width = max(1, max(map(len, src)))
        src_ids = torch.full((n_slots, width), self.ids.pad, dtype=torch.long)
        for slot, ids in enumerate(src):
            src_ids[slot, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return self.vocabulary(src_ids.to(self.device), needed)

    def _greedy_tokens(self) -> dict[int, list[int]]:
        """Each live greedy sentence's tokens so far."""
        found = {}
        for lane in self.lanes.values():
            if lane.state.beam_size == 1:
                state = lane.state
                rows = zip(lane.sentences, state.tokens.tolist(), state.steps.tolist(), strict=True)
                found.update({s.key: row[:n] for s, row, n in rows})
        return found


class SourceSlots:
    """Encoder memory and cross-attention keys and values of the running sources, one slot
    each, in tensors kept from step to step: memory (C, W, D) and (C, Hkv, W, Dh) per decoder
    layer, C slots of width W.

    A joining source is written into a free slot and a leaving one only frees its slot, so a
    step that changes the batch copies no other source. The tensors are rebuilt around the
    live sources only when a joining source is wider than W, when no slot is free, or when
    fewer than half the slots or half the width are in use (attention reads every slot).
    """

    def __init__(self) -> None:
        self.layers: list[tuple[Tensor, Tensor]] = []
        self.attended: list[tuple[Tensor, Tensor]] = []  # the layers' slots up to the last live
        self.memories: Tensor | None = None  # (C, W, D)
        self.memory: Tensor | None = None  # (C', W, D): the slots up to the last live
        self.slot_of: dict[int, int] = {}  # sentence key -> slot
        self.lengths = torch.zeros(0, dtype=torch.long)  # per slot, 0 when free
        self.mask: Tensor | None = None  # (C', 1, 1, W) bool: real positions of attended slots
        self._free: list[int] = []  # a stack: the lowest slot on top

    def update(self, sentences: list[Sentence]) -> None:
        """Make the slots hold exactly `sentences`' sources (their `memory` and `cross` set)."""
        if not sentences:
            self.layers, self.attended, self.slot_of, self.mask = [], [], {}, None
            self.memories = self.memory = None
            self._free = []
            self.lengths = self.lengths[:0]
            return
        live = {s.key for s in sentences}
        for key in [k for k in self.slot_of if k not in live]:
            slot = self.slot_of.pop(key)
            self._free.append(slot)
            self.lengths[slot] = 0
        joined = [s for s in sentences if s.key not in self.slot_of]
        width = self.layers[0][0].size(2) if self.layers else 0
        widest = max(source_positions(s.src_ids) for s in sentences)
        if (
            len(joined) > len(self._free)
            or widest > width
            or 2 * len(sentences) < self.lengths.numel()
            or 2 * widest < width
        ):
            self._rebuild(sentences, joined, widest)
        else:
            for sentence in joined:
                self._write(self._free.pop(), sentence)
        # Attention reads the slots up to the last live one only: at low load most are free.
        used = max(self.slot_of.values()) + 1
        self.attended = [(keys[:used], values[:used]) for keys, values in self.layers]
        self.memory = self.memories[:used]
        keys = self.layers[0][0]
        positions = torch.arange(keys.size(2))
        self.mask = (positions < self.lengths[:used, None])[:, None, None, :].to(keys.device)

    def _rebuild(self, sentences: list[Sentence], joined: list[Sentence], width: int) -> None:
        """New tensors with room for a quarter more sources than run now, the kept sources
        copied over in one gather per tensor."""
        kept = [s for s in sentences if s.key in self.slot_of]
        capacity = len(sentences) + max(len(sentences) // 4, 4)
        old = torch.tensor([self.slot_of[s.key] for s in kept], dtype=torch.long)
        layers = []
        for n, sentence_layer in enumerate(sentences[0].cross):
            parts = []
            for part in (0, 1):
                before = self.layers[n][part] if kept else None
                parts.append(_slots_like(sentence_layer[part], capacity, width, old, before))
            layers.append((parts[0], parts[1]))
        self.layers = layers
        # Memory (C, W, D) as one head of size D: (C, 1, W, D).
        before = self.memories[:, None] if kept else None
        self.memories = _slots_like(sentences[0].memory[None], capacity, width, old, before)[:, 0]
        lengths = torch.zeros(capacity, dtype=torch.long)
        if kept:
            lengths[: len(kept)] = self.lengths[old]
        self.lengths = lengths
        self.slot_of = {s.key: i for i, s in enumerate(kept)}
        self._free = list(range(capacity - 1, len(kept) - 1, -1))
        for sentence in joined:
            self._write(self._free.pop(), sentence)

    def _write(self, slot: int, sentence: Sentence) -> None:
        length = source_positions(sentence.src_ids)
        for (keys, values), (k, v) in zip(self.layers, sentence.cross, strict=True):
            keys[slot, :, :length] = k
            values[slot, :, :length] = v
        self.memories[slot, :length] = sentence.memory
        self.lengths[slot] = length
        self.slot_of[sentence.key] = slot


def _slots_like(
    like: Tensor, capacity: int, width: int, old: Tensor, before: Tensor | None
) -> Tensor:
    """Zeroed (capacity, Hkv, width, Dh) slots for one source's `like` (Hkv, S, Dh), the slots
    `old` of `before` (C, Hkv, W', Dh) copied into its first ones (None: nothing to keep)."""
    new = like.new_zeros(capacity, like.size(0), width, like.size(2))
    if before is not None:
        cut = min(width, before.size(2))
        new[: old.numel(), :, :cut] = before.index_select(0, old.to(before.device))[:, :, :cut]
    return new
