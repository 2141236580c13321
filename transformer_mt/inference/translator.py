"""Raw text in, detokenized translations out: the one pipeline from text to translations.

`tmt translate`, validation BLEU, `tmt attention` and scripts/run_experiment.py all translate
through `Translator`, so its rules hold on every path and live only here:

    1) split each line into its sentences (`inference.sentences`; `split_sentences`)
    2) encode each sentence; a blank line is not searched, its translation is empty (a
       prefix or phrases given to it are counted in `unforced_lines`); a sentence without a
       letter (a number, symbols) is not searched either, its translation is itself
    3) truncate to the position table: at most max_positions - 1 subwords, as the appended
       EOS takes one position (`LineEncoding`: counted, never dropped)
    4) batch the sentences of all lines by length under decode.max_tokens;
       `make_source_batches` appends the EOS
    5) search with the decode settings, decoding capped at the position table
    6) detokenize with the target tokenizer (`inference.writing`), join each line's
       sentences back with the whitespace that was between them, results in input order

Promises that users rely on in pipelines: one translation per input line, always, in input
order, with n_best hypotheses each.

Sentences, because our models learn from single sentences and translate a paragraph in one
line by its first sentence or two (docs/results.md). A line of one sentence is searched
exactly as it was before splitting existed. Lines are translated whole when a forced prefix
is given for them (the words a user typed start the line's translation, not a sentence's) and
when alignments are asked for (they index the subwords of the line as the model read it, one
source). With n_best > 1, the k-th hypothesis of a split line joins the k-th of each of its
sentences, scored by the sum of their scores: hypotheses stay best first, but they are not
the line's k best combinations.

Per-text options arrive with the texts as one `inference.requests.Texts`. Constraints (target
phrases a line's translation must contain, or a glossary's target terms for the source terms
each sentence holds) are encoded and fitted by `inference.constrained` and met by beam search;
a line given constraints of its own stays whole, as a line with a prefix does, while a
glossary is matched sentence by sentence (`Texts.keeps_whole`).

A model with language tags translates each line in its own direction when asked
(`Texts.directions`, the server's per-request languages): the tags of a `Direction`
(a source prefix, a forced target prefix) are resolved once per language pair and put in
front of that line's ids, so lines of different directions share batches.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from pathlib import Path

import torch

from transformer_mt.config import DecodeConfig, check_changes_read, config_to_dict
from transformer_mt.config.coercion import from_dict
from transformer_mt.data.batching import SourceBatch, make_source_batches, restore_order
from transformer_mt.data.specials import OWN_SPECIALS, SpecialTokens
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import SettingError
from transformer_mt.inference.constrained import (
    beam_groups,
    unused_forcing,
)
from transformer_mt.inference.cross_attention import check_alignment_layer
from transformer_mt.inference.encoding import LineEncoding
from transformer_mt.inference.ensemble import load_members, prepared_model
from transformer_mt.inference.languages import Direction, Languages, Pair, asked_direction
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.running import search_options
from transformer_mt.inference.sentences import Segments, SplitLines, split_text
from transformer_mt.inference.translation import Translation, joined_lines, kept_as_written
from transformer_mt.inference.writing import TargetWriter
from transformer_mt.machine import resolve_device
from transformer_mt.model import Seq2SeqTransformer
from transformer_mt.search import SearchResult, search
from transformer_mt.shortlist.select import Shortlist


class Translator:
    """A model, its tokenizers and search settings: lines of text in, translations out.

    Args:
        model: in eval mode, on `device` (the caller's to switch; validation shares the
            training model).
        tokenizers: (source, target).
        decode: search settings (beam size, lengths, n-best, sampling).
        lines: how lines are read and answered (`LineSettings`).
        cache_dtype: dtype of the decoding cache's keys and values (None: as computed).
        specials: the model's special ids (its checkpoint's).
        shortlist: the target ids each sentence may score (None: all).
    """

    def __init__(
        self,
        model: Seq2SeqTransformer,
        tokenizers: tuple[Tokenizer, Tokenizer],
        decode: DecodeConfig,
        *,
        device: torch.device | str = "cpu",
        lines: LineSettings = LineSettings(),
        cache_dtype: torch.dtype | None = None,
        specials: SpecialTokens = OWN_SPECIALS,
        shortlist: Shortlist | None = None,
    ):
        decode.validate()
        if lines.alignment_layer is not None:
            check_alignment_layer(lines.alignment_layer, model.cfg.decoder_layers)
            if decode.n_best > 1:
                raise SettingError(
                    "n_best", decode.n_best, "alignments are of the best translation"
                )
        self.model = model
        self.src_tokenizer, self.tgt_tokenizer = tokenizers
        self.decode = decode
        self.device = torch.device(device)
        self.alignment_layer = lines.alignment_layer
        self.cache_dtype = cache_dtype
        self.specials = specials
        self.options = search_options(model, specials, cache_dtype, shortlist)
        self.split_sentences = lines.split_sentences
        self.split_lang = lines.split_lang or lines.src_lang
        self._trained, self._asked = tuple(lines.trained), (lines.src_lang, lines.tgt_lang)
        # Language tags of each direction asked for (ids in front of its sources, and forced
        # in front of its targets); `default`: those of lines not given a direction.
        self._directions: dict[Pair, Direction] = {}
        # Not checked here: `from_checkpoint` checks it against the checkpoint's languages
        # (`Languages.check_default`), and a tagged model may have no default direction.
        self.default = self._resolved(lines.src_lang, lines.tgt_lang)
        self.encoding = LineEncoding(tokenizers, specials, model.cfg.max_positions, self.default)
        self.writer = TargetWriter(
            model, self.tgt_tokenizer, self.encoding, specials, self.default, self.alignment_layer
        )
        self.unforced_lines = 0  # blank lines given a prefix or phrases, unused

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path | Sequence[str | Path],
        *,
        device: str = "cpu",
        quantize: str | None = None,
        lines: LineSettings = LineSettings(),
        shortlist: str | Path | None = None,
        **decode_changes: object,
    ) -> Translator:
        """Load `path`; `decode_changes` override the checkpoint's decode section.

        Args:
            path: a checkpoint, or several of one vocabulary searched as one ensemble (the
                first's settings; `inference.ensemble`; no shortlist or alignments).
            quantize: None (float32), "int8" (dynamic int8 linear layers, `quantize_int8`,
                the cache in `int8_cache_dtype()`) or "bf16" (`quantize_bf16`); CPU only.
            lines: see `LineSettings`; the checkpoint fills in what they leave out: its data
                languages where the model has tags for them, the directions it was trained
                on, and its source language's sentence rules.
            shortlist: a vocabulary map file (`tmt shortlist`): each sentence scores only the
                target ids listed for its source ids (float32 rows of the projection, also
                with int8 layers); None: the whole vocabulary.

        Raises:
            ConfigError: a decode change of a name `DecodeConfig` lacks or of the wrong type
                (`sampling="false"`, `beam_size=2.5`), or changed where the others leave it
                unread (it would change nothing: `check_changes_read`).
        """
        device = resolve_device(device)
        paths = [str(path)] if isinstance(path, str | Path) else [str(p) for p in path]
        if not paths:
            raise SettingError("path", None, "no checkpoint given")
        bundles = load_members(paths, device)
        bundle = bundles[0]  # its config and tokenizers: every member's (ensemble.py)
        # Checked as a config file's decode section is: types, choices, unknown names.
        given = {**config_to_dict(bundle.config.decode), **decode_changes}
        decode = from_dict(DecodeConfig, given, "decode.")
        attends = lines.alignment_layer is not None or decode.replace_unk
        prepared = (bundles, paths, quantize, device, shortlist, attends)
        model, cache_dtype, listed = prepared_model(*prepared)
        data, specials = bundle.config.data, bundle.specials
        trained = lines.trained or tuple(data.directions())
        asked = (lines.src_lang, lines.tgt_lang)
        src_lang, tgt_lang = asked_direction(
            specials, trained, asked, (data.src_lang, data.tgt_lang)
        )
        lines = dataclasses.replace(
            lines,
            src_lang=src_lang,
            tgt_lang=tgt_lang,
            trained=trained,
            split_lang=lines.split_lang or lines.src_lang or data.src_lang,
        )
        tokenizers = (bundle.src_tokenizer, bundle.tgt_tokenizer)
        translator = cls(
            model,
            tokenizers,
            decode,
            device=device,
            lines=lines,
            cache_dtype=cache_dtype,
            specials=specials,
            shortlist=listed,
        )  # it validates `decode`: a value out of range is refused before one that goes unused
        check_changes_read(decode, bundle.config.decode)
        # As the server does, refuse a default direction the model lacks: without tags, any
        # other (it would translate into its own silently); with them, one into itself. A
        # tagged model with no default direction is given one per text (evaluate, distill).
        default = translator.languages.default
        if not specials.language_tags or None not in default:
            translator.languages.check_default(asked)
        return translator

    @property
    def source_prefix(self) -> list[int]:
        """The ids in front of every source of the default direction."""
        return list(self.default.source_prefix)

    @property
    def target_prefix(self) -> list[int]:
        """The ids forced in front of every target of the default direction."""
        return list(self.default.target_prefix)

    @cached_property
    def languages(self) -> Languages:
        """The directions the model may be asked for (`Languages.of`)."""
        return Languages.of(self.specials, self._trained, *self._asked)

    def direction(self, src_lang: str | None, tgt_lang: str | None) -> Direction:
        """The language tags of translations from `src_lang` into `tgt_lang` (None: not
        given), resolved once per pair; no tags for a model without them.

        Raises:
            SettingError: a language the model needs and was not given, or one it lacks, or
                a direction it may not be asked for (`Languages.check`, as the server checks
                a request's), naming src_lang or tgt_lang.
        """
        if (src_lang, tgt_lang) not in self._directions:
            self.languages.check(src_lang, tgt_lang)
        return self._resolved(src_lang, tgt_lang)

    def _resolved(self, src_lang: str | None, tgt_lang: str | None) -> Direction:
        """`direction` without its check, resolved once per pair."""
        found = self._directions.get((src_lang, tgt_lang))
        if found is None:
            source, target = self.specials.language_prefixes(src_lang, tgt_lang)
            found = Direction(src_lang, tgt_lang, tuple(source), tuple(target))
            self._directions[(src_lang, tgt_lang)] = found
        return found

    def translate(
        self, texts: Texts | Sequence[str], on_batch: Callable[[int], None] | None = None
    ) -> list[Translation]:
        """Translate `texts`, their sentences in batches sorted by length; results in input
        order. A text holding line breaks is translated line by line, its breaks kept
        (`sentences.split_text`; a file's lines hold none, a served text may), unless it is
        kept whole (`split`).

        `texts`: plain lines, or `Texts` with per-text options: forced prefixes (the words a
        user has typed; an empty one forces nothing), directions (for a model with language
        tags; None: every text in the translator's own, `src_lang` -> `tgt_lang`),
        constraints (target phrases the translation contains; search with a beam of at least
        one more than a text has, `inference.constrained`) and glossaries (the target terms
        of the source terms each sentence holds are its constraints).
        An empty (or blank) line is not searched: its translation is `Translation.empty`; nor
        is a sentence without a letter, which is its own translation (`kept_as_written`).
        `on_batch(n)` is called after each searched batch with the n lines it finished
        (progress reports; a line split into sentences is finished by its last one).

        Raises:
            SettingError: a direction the model has no tags for (`direction`).
            ConstraintsError: a line whose constraints cannot fit, naming it.
        """
        request = Texts.plain(texts)
        directions = self.directions_of(request)
        split = self.split(request, directions)
        return joined_lines(split, self.translate_sentences(request, split, directions, on_batch))

    def directions_of(self, request: Texts) -> list[Direction]:
        """The resolved `Direction` of each text of `request` (`direction`)."""
        if request.directions is None:
            return [self.default] * len(request)
        return [self.direction(*pair) for pair in request.directions]

    def translate_sentences(
        self,
        request: Texts,
        split: SplitLines,
        directions: Sequence[Direction],
        on_batch: Callable[[int], None] | None = None,
    ) -> list[Translation]:
        """`translate` of texts already cut into sentences (`split`, as `split` cuts
        `request`): one translation per sentence of `split.sentences`, not joined back.
        `directions`: one resolved `Direction` per text."""
        owners = split.owners
        phrases = request.sentence_phrases(split)
        prefixes = None
        if request.prefixes is not None:
            prefixes = [request.prefix(line) for line in owners]
        return self._translate_sentences(
            split.sentences,
            [directions[line] for line in owners],
            prefixes,
            owners,
            on_batch,
            phrases if any(phrases) else None,
        )

    def split(self, texts: Texts | Sequence[str], directions: Sequence[Direction]) -> SplitLines:
        """`texts` as sentences (`sentences.split_text`), each split by the rules of its
        direction's source language (else `split_lang`); whole where splitting is off (a
        line break and all), with alignments, and where a text is kept whole for its options
        (`Texts.keeps_whole`)."""
        request = Texts.plain(texts)
        splitting = self.split_sentences and self.alignment_layer is None
        return SplitLines(
            tuple(
                split_text(text, self.sentence_language(direction))
                if splitting and not request.keeps_whole(i)
                else Segments.whole(text)
                for i, (text, direction) in enumerate(zip(request.texts, directions, strict=True))
            )
        )

    def target_language(self, direction: Direction) -> str | None:
        """The language a line of `direction` is translated into: its own, else the model's
        default direction's (None: a model that names none)."""
        return direction.tgt_lang or self.languages.default[1]

    def sentence_language(self, direction: Direction) -> str | None:
        """The language whose sentence rules split a line of `direction`: its source
        language, else `split_lang` (`sentences.split_line`)."""
        return direction.src_lang or self.split_lang

    def _translate_sentences(
        self,
        sentences: Sequence[str],
        directions: Sequence[Direction],
        prefixes: Sequence[str] | None,
        owners: Sequence[int],
        on_batch: Callable[[int], None] | None,
        phrases: Sequence[Sequence[str]] | None = None,
    ) -> list[Translation]:
        """`translate` of single sentences, one direction (and prefix, and target phrases)
        each; `owners`: the line of each sentence, so that `on_batch` counts the lines a batch
        finished and errors name the line."""
        asked = prefixes or [""] * len(sentences)
        written = {
            i
            for i, sentence in enumerate(sentences)
            if kept_as_written(sentence, asked[i], phrases[i] if phrases else ())
        }
        # One kept as written is not encoded, so neither cut nor counted as cut.
        kept_out = ["" if i in written else sentence for i, sentence in enumerate(sentences)]
        encoded = self.encoding.sentence_ids(kept_out, directions, owners)
        todo = [i for i, ids in enumerate(encoded) if ids]
        n_best, no_pairs = self.decode.n_best, None if self.alignment_layer is None else []
        results = [
            Translation.as_written(sentence, n_best, no_pairs)
            if i in written
            else Translation.empty(n_best, no_pairs)
            for i, sentence in enumerate(sentences)
        ]
        blank = [i for i, ids in enumerate(encoded) if not ids and i not in written]
        self.unforced_lines += unused_forcing(asked, phrases, blank)
        forced = [self.encoding.prefix_ids(asked[i], directions[i], owners[i]) for i in todo]
        constraints = None
        if phrases is not None:
            constraints = [
                self.encoding.constraint_ids(
                    phrases[i], len(prefix), owners[i], self.target_language(directions[i])
                )
                for i, prefix in zip(todo, forced, strict=True)
            ]
        left = Counter(owners[i] for i in todo)  # sentences still to search, per line
        indices: list[int] = []  # into `todo`, batch by batch
        searched: list[Translation] = []
        sources = [encoded[i] for i in todo]
        # Each searched sentence's source, given where unknown pieces are written from it.
        written_from = [(sentences[i] if self.decode.replace_unk else None) for i in todo]
        searches = self.search_batches(sources, forced if any(forced) else None, constraints)
        for batch, found in searches:
            rows = batch.indices.tolist()
            from_rows = [(written_from[i], directions[todo[i]]) for i in rows]
            searched.extend(self.writer.batch(batch, found, from_rows))
            indices.extend(rows)
            if on_batch is not None:
                lines = [owners[todo[i]] for i in rows]
                left.subtract(lines)
                on_batch(sum(left[line] == 0 for line in set(lines)))
        for i, translation in zip(todo, restore_order(indices, searched), strict=True):
            results[i] = translation
        return results

    def batches(
        self, sources: Sequence[Sequence[int]], max_tokens: int | None = None
    ) -> Iterator[SourceBatch]:
        """`sources` (from `encoding.source_ids`) in length-sorted batches of at most `max_tokens`
        (default `decode.max_tokens`), EOS appended, on the device."""
        budget = max_tokens or self.decode.max_tokens
        for batch in make_source_batches(sources, budget, self.specials):
            yield batch.to(self.device)

    def search_batches(
        self,
        sources: Sequence[Sequence[int]],
        prefixes: Sequence[Sequence[int]] | None = None,
        constraints: Sequence[Sequence[Sequence[int]]] | None = None,
    ) -> Iterator[tuple[SourceBatch, list[SearchResult]]]:
        """Each batch of `sources` with the search results of its rows, in the batch's order;
        `prefixes` (from `encoding.prefix_ids`), one per source, are forced; without them, the
        default direction's target tag where the model starts targets with one. `constraints`
        (from `encoding.constraint_ids`), one list per source, are met; a source with more of
        them than the beam serves is searched with a wider beam, in batches of its own
        (`constrained.beam_groups`)."""
        if prefixes is None and self.target_prefix:
            prefixes = [self.target_prefix] * len(sources)
        if constraints is None:
            groups = [(self.decode.beam_size, None)]
        else:
            groups = beam_groups(constraints, self.decode.beam_size)
        for beam_size, members in groups:
            decode = dataclasses.replace(self.decode, beam_size=beam_size)
            chosen = sources if members is None else [sources[i] for i in members]
            for batch in self.batches(chosen):
                if members is not None:  # number the rows among all sources
                    index = torch.tensor(members, device=batch.indices.device)[batch.indices]
                    batch = dataclasses.replace(batch, indices=index)
                rows = batch.indices.tolist()
                forced = None if prefixes is None else [prefixes[i] for i in rows]
                phrases = None if constraints is None else [constraints[i] for i in rows]
                found = search(
                    self.model, batch.src_ids, batch.src_mask, decode, self.options, forced, phrases
                )
                yield batch, found
