"""Make a shortlist for a checkpoint from a parallel corpus: both sides through the
checkpoint's own tokenizers, IBM Model 1 (`lexicon`), the likeliest target pieces of each
source piece and the most frequent target pieces, written as a vocabulary map (`vmap`) that
names the checkpoint's vocabularies (`vmap.Vocabularies`).

The corpus is the one the model learnt from (for a student: the teacher's translations, which
is what the student imitates); its own config's `data.train` by default.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from transformer_mt.artifacts import load_checkpoint
from transformer_mt.config import DataConfig, config_from_dict
from transformer_mt.data.dataset import stream_pairs
from transformer_mt.data.locations import check_sources, describe_split, split_files
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import TmtError
from transformer_mt.files import check_output, write_errors
from transformer_mt.input_files import as_read, config_input_files
from transformer_mt.progress import Counted, ProgressReport
from transformer_mt.shortlist.corpus import Chunk, EncodedCorpus
from transformer_mt.shortlist.lexicon import DEFAULT_SETTINGS, ShortlistSettings, frequent, model1
from transformer_mt.shortlist.vmap import Vocabularies, write_vmap

log = logging.getLogger(__name__)

CHUNK_PAIRS = 50_000  # pairs read and tokenised at a time
READ = Counted(verb="read", noun="pairs", rate_unit="pairs", label="shortlist")


@dataclass(frozen=True)
class ShortlistReport:
    pairs: int
    sources: int  # source pieces with a list
    mean_list: float  # target pieces per listed source piece
    seconds: float

    def __str__(self) -> str:
        return (
            f"{self.pairs} pairs, {self.sources} source pieces listed with {self.mean_list:.1f} "
            f"target pieces each on average, in {self.seconds:.1f} s"
        )


def _check_direction(
    checkpoint: str | Path, own: DataConfig, data: DataConfig, tagged: bool
) -> None:
    """Refuse a corpus of a direction a model without language tags does not translate: the
    lists of an en->de corpus, scored by a de->en model, keep the wrong target pieces (and a
    joint vocabulary's digest cannot tell). A tagged model is told its direction per text."""
    if tagged:
        return
    other = [pair for pair in data.directions() if pair not in own.directions()]
    if other:
        names = ", ".join(f"{src}->{tgt}" for src, tgt in own.directions())
        raise TmtError(
            f"{checkpoint}: translates {names}, not {other[0][0]}->{other[0][1]}, the direction "
            f"of data.train {describe_split(data)!r}; give a corpus of {names}"
        )


def build_shortlist(
    checkpoint: str | Path,
    out: str | Path,
    data: DataConfig | None = None,
    settings: ShortlistSettings = DEFAULT_SETTINGS,
    progress: bool = False,
) -> ShortlistReport:
    """Write the shortlist of `checkpoint` learnt from `data.train` (default: the checkpoint's
    own) to `out`; with `progress`, the pairs read and the EM passes over them on stderr (a
    bar on a terminal, else a line every 30 s: a million pairs take minutes).

    Raises:
        TmtError: an unreadable checkpoint or corpus, a corpus of a direction the model does
            not translate, an output over an input (the checkpoint, the corpus, a file the
            checkpoint was made from).
    """
    settings.validate()
    stored = load_checkpoint(checkpoint, map_location="cpu")
    config = config_from_dict(stored.config, source=f"{checkpoint} (stored config)")
    data = data or as_read(config.data, stored.workdir, ("train",))
    _check_direction(
        checkpoint, config.data, data, bool(stored.special_tokens(checkpoint).language_tags)
    )
    check_sources(data, ("train",))
    corpus_files = [
        (path, "corpus the shortlist is learnt from") for path in split_files(data, "train")
    ]
    made_from = config_input_files(config, f"checkpoint {checkpoint}", stored.workdir)
    check_output(out, [(checkpoint, "checkpoint"), *corpus_files, *made_from])
    src_tokenizer, tgt_tokenizer = stored.unpack_tokenizers(checkpoint)
    start = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="tmt-shortlist-") as folder,
        write_errors(Path(folder), Path(folder) / "corpus"),  # a full TMPDIR named
    ):
        corpus = _encoded(data, src_tokenizer, tgt_tokenizer, Path(folder), progress)
        passes = settings.iterations + 1  # model1 reads the corpus once, then once an iteration
        aligned = Counted("aligned", f"pairs over {passes} passes", "pairs", label="shortlist")
        with contextlib.closing(_report(corpus.pairs * passes, aligned, progress)) as report:
            lexicon = model1(_counting(corpus.chunks, report), settings.iterations)
    best = lexicon.best(settings.per_source, settings.min_prob)
    seen = np.flatnonzero(corpus.source_seen).tolist()
    lists = widen(
        {
            src_tokenizer.id_to_piece(s): [tgt_tokenizer.id_to_piece(t) for t in best.get(s, [])]
            for s in seen
        },
        {tgt_tokenizer.id_to_piece(i) for i in range(tgt_tokenizer.vocab_size)},
    )
    always = frequent(corpus.target_counts, settings.frequent)
    vocabularies = Vocabularies.of(src_tokenizer, tgt_tokenizer)
    write_vmap(out, [tgt_tokenizer.id_to_piece(i) for i in always], lists, vocabularies)
    report = ShortlistReport(
        pairs=corpus.pairs,
        sources=len(lists),
        mean_list=sum(map(len, lists.values())) / max(len(lists), 1),
        seconds=time.perf_counter() - start,
    )
    log.info("shortlist: %s; wrote %s", report, out)
    return report


def _encoded(
    data: DataConfig, src: Tokenizer, tgt: Tokenizer, folder: Path, progress: bool
) -> EncodedCorpus:
    """`data.train` read once, tokenised a chunk at a time into `folder`."""
    corpus = EncodedCorpus(folder, src.vocab_size, tgt.vocab_size)
    pairs = stream_pairs(data, "train")
    with contextlib.closing(_report(None, READ, progress)) as report:
        while chunk := list(itertools.islice(pairs, CHUNK_PAIRS)):
            sources = src.encode_batch([source for source, _, _ in chunk])
            corpus.add(Chunk.of(sources, tgt.encode_batch([target for _, target, _ in chunk])))
            report.update(len(chunk))
    log.info("shortlist: %d pairs read from %s", corpus.pairs, describe_split(data))
    return corpus


def _counting(
    chunks: Callable[[], Iterator[Chunk]], report: ProgressReport
) -> Callable[[], Iterator[Chunk]]:
    """`chunks`, each pass counting its pairs into `report`."""

    def read() -> Iterator[Chunk]:
        for chunk in chunks():
            yield chunk
            report.update(len(chunk))

    return read


def _report(total: int | None, counted: Counted, progress: bool) -> ProgressReport:
    """A report on stderr with `progress`, else one that only counts."""
    if progress:
        return ProgressReport.on_stderr(total, counted)
    return ProgressReport(total, counted, bar=False, every_s=None)


def widen(lists: dict[str, list[str]], target_pieces: set[str]) -> dict[str, list[str]]:
    """Each source piece's list with the other case of each listed piece ("▁man": "▁Man") and
    the source piece itself, where the target vocabulary has them; empty lists dropped.

    Of the small student's valid2016 translations, 28% held a piece its sentence's lists
    lacked, mostly a word capitalised at the start of a sentence that the corpus has in lower
    case more often ("▁Man", "▁Woman", "▁Dog"); the piece itself covers names and numbers,
    which a translation copies.
    """
    widened = {}
    for source, targets in lists.items():
        pieces = [*targets, *map(other_case, targets), source]
        kept = [piece for piece in dict.fromkeys(pieces) if piece in target_pieces]
        if kept:
            widened[source] = kept
    return widened


def other_case(piece: str) -> str:
    """`piece` with its first letter (after a word-start mark) in the other case."""
    start = 1 if piece.startswith("\u2581") else 0
    head = piece[start : start + 1]
    return piece[:start] + head.swapcase() + piece[start + 1 :]
