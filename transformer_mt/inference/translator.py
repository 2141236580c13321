"""Raw text in, detokenized translations out: the one pipeline from text to translations.

`tmt translate`, validation BLEU, `tmt attention` and scripts/run_experiment.py all translate
through `Translator`, so its rules hold on every path and live only here:

    1) encode each line; a blank line is not searched, its translation is empty
    2) truncate to the position table: at most max_positions - 1 subwords, as the appended
       EOS takes one position (counted in `truncated_lines`, never dropped)
    3) batch by length under decode.max_tokens; `make_source_batches` appends the EOS
    4) search with the decode settings, decoding capped at the position table
    5) detokenize with the target tokenizer, results in input order

Promises that users rely on in pipelines: one translation per input line, always, in input
order, with n_best hypotheses each.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_mt.artifacts import load_for_inference
from transformer_mt.config import DecodeConfig, check_one_prefix_per_text
from transformer_mt.data.batching import SourceBatch, make_source_batches, restore_order
from transformer_mt.data.specials import OWN_SPECIALS, SpecialTokens
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import SettingError
from transformer_mt.inference.packed import pack_where_it_pays
from transformer_mt.inference.quantize import QUANTIZE_OPTIONS, int8_cache_dtype, quantize_int8
from transformer_mt.machine import resolve_device
from transformer_mt.model import Seq2SeqTransformer
from transformer_mt.search import SearchOptions, SearchResult, SpecialIds, search

# The decode changes that make any settings a greedy search with the same length limits
# (validation and attention maps: one cheap, deterministic hypothesis).
GREEDY = {"beam_size": 1, "n_best": 1, "sampling": False}


def greedy(decode: DecodeConfig) -> DecodeConfig:
    """`decode` as a greedy search (see GREEDY)."""
    return dataclasses.replace(decode, **GREEDY)


def search_options(
    model: Seq2SeqTransformer,
    specials: SpecialTokens = OWN_SPECIALS,
    cache_dtype: torch.dtype | None = None,
) -> SearchOptions:
    """How every translation search of `model` runs: with its special ids, decoding capped at
    its position table (a hypothesis never needs a position the model lacks), keys and values
    of the decoding cache stored in `cache_dtype` (None: the dtype they are computed in)."""
    new_cache = None
    if cache_dtype is not None:
        new_cache = functools.partial(model.decoder.new_cache, dtype=cache_dtype)
    ids = SpecialIds(specials.pad, specials.bos, specials.eos, specials.never)
    return SearchOptions(ids=ids, max_len_cap=model.cfg.max_positions, new_cache=new_cache)


@dataclass
class Translation:
    """The n-best translations of one input line, best first, with their search scores.

    `alignment` (with alignments on): (source index, target index) subword pairs of the best.
    """

    texts: list[str]
    scores: list[float]
    alignment: list[tuple[int, int]] | None = None

    @classmethod
    def empty(cls, n_best: int, alignment: list | None = None) -> Translation:
        """The translation of a blank line: n_best empty strings, each with score 0.0 (the
        log-probability of nothing), so n-best output keeps n_best lines for every input."""
        return cls([""] * n_best, [0.0] * n_best, alignment)


class Translator:
    """A model, its tokenizers and search settings: lines of text in, translations out.

    Args:
        model: in eval mode, on `device` (the caller's to switch; validation shares the
            training model).
        decode: search settings (beam size, lengths, n-best, sampling).
        alignment_layer: None (no alignments), or the decoder layer whose cross-attention
            aligns target to source subwords; negative values count from the last.
        cache_dtype: dtype of the decoding cache's keys and values (None: as computed).
        specials: the model's special ids (its checkpoint's).
        src_lang, tgt_lang: the languages of a model with language tags (a multilingual
            OPUS-MT model needs tgt_lang, NLLB both); a model without ignores them.
    """

    def __init__(
        self,
        model: Seq2SeqTransformer,
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        decode: DecodeConfig,
        device: torch.device | str = "cpu",
        alignment_layer: int | None = None,
        cache_dtype: torch.dtype | None = None,
        specials: SpecialTokens = OWN_SPECIALS,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
    ):
        decode.validate()
        if alignment_layer is not None:
            _check_alignment_layer(alignment_layer, model.cfg.decoder_layers)
            if decode.n_best > 1:
                raise SettingError(
                    "n_best", decode.n_best, "alignments are of the best translation"
                )
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.decode = decode
        self.device = torch.device(device)
        self.alignment_layer = alignment_layer
        self.cache_dtype = cache_dtype
        self.specials = specials
        self.options = search_options(model, specials, cache_dtype)
        # Language tags: ids in front of every source, and forced in front of every target.
        self.source_prefix, self.target_prefix = specials.language_prefixes(src_lang, tgt_lang)
        # Tags a user typed do not switch the language: they are taken out of the text.
        self._typed_tags = set(specials.language_tags.values())
        # Tokens a line, or a forced prefix, may keep: the position table also holds the tags
        # and the EOS (the prefix: the token after it).
        room = model.cfg.max_positions - 1
        self.max_src_tokens = room - len(self.source_prefix)
        self.max_prefix_tokens = room - len(self.target_prefix)
        self.truncated_lines = 0
        self.tagged_lines = 0  # lines that held a language tag, taken out

    @classmethod
    def from_checkpoint(
        cls,
        path: str,
        device: str = "cpu",
        quantize: str | None = None,
        alignment_layer: int | None = None,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
        **decode_changes: object,
    ) -> Translator:
        """Load `path`; `decode_changes` override the checkpoint's decode section.

        Args:
            quantize: None (float32) or "int8": dynamic int8 linear layers, CPU only (see
                `quantize_int8`), with the cache in `int8_cache_dtype()`.
            alignment_layer: see the class.
            src_lang, tgt_lang: see the class; None: the checkpoint's data languages where
                the model has tags for them.
        """
        device = resolve_device(device)
        bundle = load_for_inference(path, device)
        model, cache_dtype = bundle.model, None
        if quantize is not None:
            if quantize not in QUANTIZE_OPTIONS:
                raise SettingError(
                    "quantize", quantize, f"choose one of {', '.join(QUANTIZE_OPTIONS)}"
                )
            if device.type != "cpu":
                raise SettingError(
                    "quantize", quantize, "int8 layers run on the CPU only (device cpu)"
                )
            model, cache_dtype = quantize_int8(model), int8_cache_dtype()
        elif device.type == "cpu":
            pack_where_it_pays(model)
        decode = dataclasses.replace(bundle.config.decode, **decode_changes)
        return cls(
            model,
            bundle.src_tokenizer,
            bundle.tgt_tokenizer,
            decode,
            device,
            alignment_layer,
            cache_dtype,
            bundle.specials,
            src_lang or _tagged(bundle.config.data.src_lang, bundle.specials),
            tgt_lang or _tagged(bundle.config.data.tgt_lang, bundle.specials),
        )

    def translate(
        self,
        lines: Sequence[str],
        on_batch: Callable[[int], None] | None = None,
        prefixes: Sequence[str] | None = None,
    ) -> list[Translation]:
        """Translate `lines` (no newlines) in batches sorted by length; results in input order.

        An empty (or blank) line is not searched: its translation is `Translation.empty`.
        `on_batch(n)` is called after each searched batch of n lines (progress reports).
        `prefixes`: one target-side text per line that its translations must start with (an
        empty one forces nothing), e.g. the words a user has typed.
        """
        encoded = [self.source_ids(line) for line in lines]
        todo = [i for i, ids in enumerate(encoded) if ids]
        no_pairs = None if self.alignment_layer is None else []
        results = [Translation.empty(self.decode.n_best, no_pairs) for _ in lines]
        check_one_prefix_per_text(prefixes, len(lines))
        forced = None if prefixes is None else [self.prefix_ids(prefixes[i]) for i in todo]
        indices: list[int] = []  # into `todo`, batch by batch
        searched: list[Translation] = []
        for batch, found in self.search_batches([encoded[i] for i in todo], forced):
            for row, result in enumerate(found):
                searched.append(self.detokenize(result))
                if self.alignment_layer is not None:
                    src_ids = batch.src_ids[row, batch.src_mask[row].view(-1)]  # (S,), with EOS
                    searched[-1].alignment = alignment_pairs(
                        self.model,
                        src_ids,
                        result.best.tokens,
                        self.alignment_layer,
                        self.specials.bos,
                        source_tags=len(self.source_prefix),
                        target_tags=len(self.target_prefix),
                    )
            indices.extend(batch.indices.tolist())
            if on_batch is not None:
                on_batch(len(found))
        for i, translation in zip(todo, restore_order(indices, searched), strict=True):
            results[i] = translation
        return results

    def source_ids(self, line: str) -> list[int]:
        """The subword ids of one line, after the model's language tag, cut to the position
        table; [] for a line with nothing to translate.

        A language tag in the text (`>>fra<<` typed by a user) is taken out and counted: the
        language comes from `tgt_lang` alone, never switched by what a line holds.
        """
        if not line.strip():
            return []
        ids = self.src_tokenizer.encode(line)
        if self._typed_tags and not self._typed_tags.isdisjoint(ids):
            self.tagged_lines += 1
            ids = [i for i in ids if i not in self._typed_tags]
        if not ids:
            return []
        if len(ids) > self.max_src_tokens:
            self.truncated_lines += 1
            ids = ids[: self.max_src_tokens]
        return self.source_prefix + ids

    def prefix_ids(self, text: str) -> list[int]:
        """The target subword ids a translation is forced to start with, cut so that the
        prefix and one more token fit the position table."""
        ids = self.tgt_tokenizer.encode(text)[: self.max_prefix_tokens] if text.strip() else []
        return self.target_prefix + ids

    def batches(
        self, sources: Sequence[Sequence[int]], max_tokens: int | None = None
    ) -> Iterator[SourceBatch]:
        """`sources` (from `source_ids`) in length-sorted batches of at most `max_tokens`
        (default `decode.max_tokens`), EOS appended, on the device."""
        budget = max_tokens or self.decode.max_tokens
        for batch in make_source_batches(sources, budget, self.specials):
            yield batch.to(self.device)

    def search_batches(
        self,
        sources: Sequence[Sequence[int]],
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> Iterator[tuple[SourceBatch, list[SearchResult]]]:
        """Each batch of `sources` with the search results of its rows, in the batch's order;
        `prefixes` (from `prefix_ids`), one per source, are forced; without them, the target
        language's tag where the model starts targets with one."""
        if prefixes is None and self.target_prefix:
            prefixes = [self.target_prefix] * len(sources)
        for batch in self.batches(sources):
            forced = None if prefixes is None else [prefixes[i] for i in batch.indices.tolist()]
            found = search(
                self.model, batch.src_ids, batch.src_mask, self.decode, self.options, forced
            )
            yield batch, found

    def detokenize(self, result: SearchResult) -> Translation:
        """A search result's hypotheses as target text, with their scores."""
        return Translation(
            [self.text(h.tokens) for h in result.hypotheses], [h.score for h in result.hypotheses]
        )

    def text(self, tokens: Sequence[int]) -> str:
        """The target text of output `tokens`, without the forced language tag."""
        return self.tgt_tokenizer.decode(tokens[len(self.target_prefix) :])


def alignment_pairs(
    model: Seq2SeqTransformer,
    src_ids: Tensor,
    tgt_ids: list[int],
    layer: int,
    bos: int,
    source_tags: int = 0,
    target_tags: int = 0,
) -> list[tuple[int, int]]:
    """Subword alignment of one sentence pair from cross-attention (plain-math path).

    Target token j is produced by decoder query j (input `bos` + tgt_ids[:j]); it aligns to the
    source subword with the largest weight of decoder layer `layer`'s cross-attention,
    averaged over heads. The appended source EOS is never chosen (unless it is all there is),
    nor are language tags, which are fed to the model but are not words of either side.

    Args:
        src_ids: (S,) `source_tags` language tags, the real source tokens, then EOS; no
            padding.
        tgt_ids: the translation's tokens, no BOS or EOS: `target_tags` forced tags first.

    Returns:
        (source index, target index) pairs, one per target token after the tags, indices
        counted from the first subword after the tags.
    """
    if len(tgt_ids) <= target_tags:
        return []
    tgt_in = torch.tensor([[bos, *tgt_ids[:-1]]], device=src_ids.device)  # (1, T)
    with torch.no_grad():
        cross = model.attention_maps(src_ids[None], tgt_in).cross[layer]  # (1, H, T, S)
    n_words = max(src_ids.numel() - 1, source_tags + 1)  # up to the EOS
    best = cross[0].mean(0)[target_tags:, source_tags:n_words].argmax(-1)  # (T',)
    return [(int(s), t) for t, s in enumerate(best.tolist())]


def _tagged(code: str, specials: SpecialTokens) -> str | None:
    """`code` when the model has a language tag for it, else None."""
    return code if code in specials.language_tags else None


def _check_alignment_layer(layer: int, n_layers: int) -> None:
    if not -n_layers <= layer < n_layers:
        raise SettingError(
            "alignment_layer",
            layer,
            f"the model has {n_layers} decoder layer(s) (0..{n_layers - 1}, or -1 for the last)",
        )
