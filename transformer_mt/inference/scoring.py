"""Sentence pairs scored by forced decoding: log P(target | source) under a model, as fairseq's
`--score-reference`, `marian-scorer` and CTranslate2's `score_batch` compute it; and the files
`tmt score` reads and writes (parallel text, n-best lists).

A pair is read through the Translator's own pieces, so that its rules hold here too: the source
as `LineEncoding.source_ids` reads a line (language tags, cut to the position table), the target
as `LineEncoding.prefix_ids` encodes a forced prefix (target tags, then the subwords, cut so that
they and the EOS fit), EOS appended to both. Pairs go through the model in batches of similar
length, one teacher-forced forward each: decoder input BOS + target, labels target + EOS. Right
padding changes no real position (the source mask hides padded keys, the causal mask hides
padded queries from real ones), so a pair scores the same in any batch (tested).

The score of a pair is the sum of the natural log-probabilities of its target subwords and the
EOS, as CTranslate2's `score_batch` sums its `log_probs` (tested equal within 1e-4 on an exported
model); forced language tags are given, not chosen, and are not counted. The mean per token
divides by the tokens counted (subwords + 1). A pair whose source is blank is not scored (None),
as `Translator.translate` never asks the model to translate nothing; a blank target is scored as
EOS alone, the probability of translating into nothing, which an n-best list may hold.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import torch

from transformer_mt.data.specials import SpecialTokens
from transformer_mt.errors import SettingError, TmtError, string_items
from transformer_mt.inference.nbest import Hypotheses, format_hypothesis, iter_nbest
from transformer_mt.inference.translator import Translator
from transformer_mt.model import Seq2SeqTransformer
from transformer_mt.text_files import file_problem, iter_lines, parallel_chunks

CHUNK_PAIRS = 10_000  # pairs of two parallel files read, scored and written at a time
UNSCORED = "nan"  # the score written for a pair with a blank source: no threshold keeps it


@dataclass(frozen=True)
class PairScore:
    """One pair's log-probability by forced decoding.

    Attributes:
        log_prob: natural log P(target + EOS | source), summed over the counted tokens.
        n_tokens: the tokens counted: the target's subwords and the EOS (no language tags).
        cut: the source or the target was cut to the model's position table, so this is the
            score of the pair's beginning.
        unknown: the target holds characters the target vocabulary lacks, scored as its
            unknown piece (⁇): the score of another text.
    """

    log_prob: float
    n_tokens: int
    cut: bool = False
    unknown: bool = False

    @property
    def per_token(self) -> float:
        """The mean log-probability per counted token."""
        return self.log_prob / self.n_tokens


@dataclass
class ScoredCounts:
    """What a file scorer saw: pairs (or hypotheses) scored, blank sources left unscored,
    pairs cut to the position table and targets holding unknown pieces; for the summary a
    command prints."""

    pairs: int = 0
    unscored: int = 0
    cut: int = 0
    unknown: int = 0

    def add(self, scores: Sequence[PairScore | None]) -> None:
        self.pairs += len(scores)
        self.unscored += sum(s is None for s in scores)
        self.cut += sum(s is not None and s.cut for s in scores)
        self.unknown += sum(s is not None and s.unknown for s in scores)


def score_pairs(
    translator: Translator,
    sources: Sequence[str],
    targets: Sequence[str],
    max_tokens: int | None = None,
) -> list[PairScore | None]:
    """The score of each (source, target) pair of text, in the translator's default direction;
    None for a pair whose source is blank (see the module).

    Args:
        max_tokens: rows x the longest row (source or target, with EOS) per forward pass;
            None: the translator's decode.max_tokens. A longer pair goes alone.
    """
    sources = string_items(sources, "sources")
    targets = string_items(targets, "targets")
    if len(sources) != len(targets):
        raise SettingError("targets", None, f"{len(targets)} for {len(sources)} sources")
    before = translator.encoding.truncated_lines
    encoded = []
    for text in sources:
        ids = translator.encoding.source_ids(text)
        encoded.append((ids, translator.encoding.truncated_lines > before))
        before = translator.encoding.truncated_lines
    todo = [i for i, (ids, _) in enumerate(encoded) if ids]
    tags = len(translator.target_prefix)
    forced = [_target_ids(translator, targets[i]) for i in todo]
    found = score_ids(
        translator.model,
        [encoded[i][0] for i in todo],
        [ids for ids, _ in forced],
        translator.specials,
        max_tokens=max_tokens or translator.decode.max_tokens,
        skip=tags,
    )
    scores: list[PairScore | None] = [None] * len(sources)
    unk = translator.specials.unk
    for i, (log_prob, n_tokens), (ids, target_cut) in zip(todo, found, forced, strict=True):
        scores[i] = PairScore(log_prob, n_tokens, encoded[i][1] or target_cut, unk in ids)
    return scores


def _target_ids(translator: Translator, text: str) -> tuple[list[int], bool]:
    """`LineEncoding.prefix_ids` of a target, and whether it was cut to the position table
    (only a target that fills the table can have been: it is encoded again to see)."""
    ids = translator.encoding.prefix_ids(text)
    full = len(ids) == translator.model.cfg.max_positions - 1
    cut = full and len(ids) - len(translator.target_prefix) < len(
        translator.tgt_tokenizer.encode(text)
    )
    return ids, cut


def score_ids(
    model: Seq2SeqTransformer,
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    specials: SpecialTokens,
    *,
    max_tokens: int | None = None,
    skip: int = 0,
) -> list[tuple[float, int]]:
    """(sum of log-probabilities, tokens counted) of each target given its source, by one
    teacher-forced forward per length-sorted batch.

    Args:
        model: in eval mode.
        sources: per pair the source ids without EOS (language tags first), at least one.
        targets: per pair the target ids without BOS or EOS (forced tags first); may be empty.
        specials: the model's BOS, EOS and pad ids.
        max_tokens: rows x the longest row per forward (None: all pairs in one).
        skip: leading target tokens (forced language tags) that are fed but not counted.

    Returns:
        per pair, in input order, the sum over target[skip:] + EOS and its length.
    """
    device = next(model.parameters()).device
    found: list[tuple[float, int]] = [(0.0, 0)] * len(sources)
    for rows in length_batches(sources, targets, max_tokens):
        src_lens = torch.tensor([len(sources[i]) + 1 for i in rows])  # (B,), with EOS
        tgt_lens = torch.tensor([len(targets[i]) + 1 for i in rows])  # (B,), BOS or EOS
        src = _padded([[*sources[i], specials.eos] for i in rows], specials.pad)  # (B, S)
        tgt_in = _padded([[specials.bos, *targets[i]] for i in rows], specials.pad)  # (B, T)
        tgt_out = _padded([[*targets[i], specials.eos] for i in rows], specials.pad)  # (B, T)
        src_mask = torch.arange(src.size(1)) < src_lens[:, None]  # (B, S), True at real tokens
        with torch.no_grad():
            logits = model(src.to(device), tgt_in.to(device), src_mask[:, None, None, :].to(device))
        log_probs = logits.float().log_softmax(-1).cpu()  # (B, T, V)
        chosen = log_probs.gather(-1, tgt_out[..., None]).squeeze(-1)  # (B, T)
        positions = torch.arange(tgt_out.size(1))
        counted = (positions >= skip) & (positions < tgt_lens[:, None])  # (B, T)
        totals = torch.where(counted, chosen, 0.0).sum(-1)  # (B,)
        for row, i in enumerate(rows):
            found[i] = (float(totals[row]), int(counted[row].sum()))
    return found


def length_batches(
    sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], max_tokens: int | None
) -> list[list[int]]:
    """Pair indices in batches of similar length, longest first (an out-of-memory batch shows
    up at once), rows x the longest side of their longest pair (EOS counted) at most
    `max_tokens`; None: one batch."""
    cost = [max(len(s), len(t)) + 1 for s, t in zip(sources, targets, strict=True)]
    ordered = sorted(range(len(cost)), key=lambda i: -cost[i])
    if max_tokens is None:
        return [ordered] if ordered else []
    batches: list[list[int]] = []
    for i in ordered:
        if not batches or (len(batches[-1]) + 1) * cost[batches[-1][0]] > max_tokens:
            batches.append([])
        batches[-1].append(i)
    return batches


def _padded(rows: list[list[int]], pad: int) -> torch.Tensor:
    """(B, L) long: `rows` right-padded with `pad`."""
    width = max(map(len, rows))
    return torch.tensor([row + [pad] * (width - len(row)) for row in rows], dtype=torch.long)


def format_score(score: PairScore | None) -> str:
    """`total<TAB>per_token`, four decimals each; `nan<TAB>nan` for an unscored pair."""
    if score is None:
        return f"{UNSCORED}\t{UNSCORED}"
    return f"{score.log_prob:.4f}\t{score.per_token:.4f}"


def score_files(
    translator: Translator,
    src_path: str | Path,
    tgt_path: str | Path,
    out: TextIO,
    max_tokens: int | None = None,
    done: Callable[[int], None] | None = None,
) -> ScoredCounts:
    """Write `format_score` of each pair of the parallel files, one line per pair in input
    order, reading and scoring `CHUNK_PAIRS` pairs at a time; `done(n)` after each chunk of
    `n` pairs written (a progress report's count).

    Raises:
        TmtError: the files differ in length (naming both and their line counts, once the
            shorter ends: `out` is expected to be discarded then), or one cannot be read.
    """
    counts = ScoredCounts()
    chunks = parallel_chunks(
        iter_lines(src_path), iter_lines(tgt_path), CHUNK_PAIRS, refuse_unequal(src_path, tgt_path)
    )
    for sources, targets in chunks:
        scores = score_pairs(translator, sources, targets, max_tokens)
        counts.add(scores)
        for score in scores:
            print(format_score(score), file=out)
        if done is not None:
            done(len(scores))
    return counts


def refuse_unequal(src_path: str | Path, tgt_path: str | Path) -> Callable[[int, int], None]:
    """The line-count check of `parallel_chunks` for the sources and targets to score."""

    def check(n_src: int, n_tgt: int) -> None:
        if n_src != n_tgt:
            raise TmtError(
                f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}: "
                "scoring reads one target line per source line"
            )

    return check


def rescore_nbest(
    translator: Translator,
    src_path: str | Path,
    nbest_path: str | Path,
    out: TextIO,
    max_tokens: int | None = None,
    done: Callable[[int], None] | None = None,
) -> ScoredCounts:
    """Write each hypothesis of the n-best list (`inference.nbest`) with its log-prob as the
    score (`nan` for a blank source's), each source's hypotheses best first (ties keep the
    list's order), the sources in the list's order; `done(n)` after each chunk of `n` sources
    written.

    The list is read through once to check it before anything is scored, so that a mistake on
    its last line costs no scoring; then scored `CHUNK_PAIRS` hypotheses at a time.

    Raises:
        TmtError: as `nbest.iter_nbest`, or the sources cannot be read, or either is not a
            regular file.
    """
    for path in (src_path, nbest_path):  # a pipe's second reading would find it empty
        if (problem := file_problem(Path(path))) is not None:
            raise TmtError(
                f"{path}: {problem}; an n-best list and its sources are read twice (checked, "
                "then scored): give them as files"
            )
    n_sources = sum(1 for _ in iter_lines(src_path))
    for _ in iter_nbest(nbest_path, n_sources):
        pass
    sources = _LinesByIndex(src_path)
    counts = ScoredCounts()
    for chunk in _chunks(iter_nbest(nbest_path, n_sources), CHUNK_PAIRS):
        text_of = sources.fetch(group.index for group in chunk)
        pairs = [(group.index, text) for group in chunk for text in group.texts]
        scores = iter(
            score_pairs(
                translator, [text_of[i] for i, _ in pairs], [t for _, t in pairs], max_tokens
            )
        )
        for group in chunk:
            scored = [(text, next(scores)) for text in group.texts]
            counts.add([score for _, score in scored])
            scored.sort(key=lambda pair: math.inf if pair[1] is None else -pair[1].log_prob)
            for text, score in scored:
                log_prob = math.nan if score is None else score.log_prob
                print(format_hypothesis(group.index, text, log_prob), file=out)
        if done is not None:
            done(len(chunk))
    return counts


def _chunks(groups: Iterator[Hypotheses], size: int) -> Iterator[list[Hypotheses]]:
    """Whole sources' hypotheses, at least `size` hypotheses a chunk (but the last)."""
    chunk: list[Hypotheses] = []
    held = 0
    for group in groups:
        chunk.append(group)
        held += len(group.texts)
        if held >= size:
            yield chunk
            chunk, held = [], 0
    if chunk:
        yield chunk


class _LinesByIndex:
    """Lines of a file fetched by their index (from 0), holding none: a fetch reads on from
    the last one when its indices come later in the file (an n-best list's sources in order:
    one pass in all), and from the start otherwise."""

    def __init__(self, path: str | Path):
        self.path = path
        self._lines: Iterator[str] | None = None
        self._next = 0  # the index of the line `_lines` yields next

    def fetch(self, indices: Iterable[int]) -> dict[int, str]:
        wanted = sorted(set(indices))
        if self._lines is None or (wanted and wanted[0] < self._next):
            self._lines, self._next = iter_lines(self.path), 0
        found = {}
        for index in wanted:
            line = next(itertools.islice(self._lines, index - self._next, None), None)
            if line is None:
                raise TmtError(f"{self.path}: ended before line {index + 1} (changed while read?)")
            found[index], self._next = line, index + 1
        return found
