"""The teacher's translation of a training corpus, as a job that survives being killed.

    run_dir/
      manifest.json      what is distilled (`manifest.Manifest`)
      chunks/00000.txt   the teacher's translations of corpus lines [0, chunk_lines), one a
                         line; chunk k holds lines [k * chunk_lines, (k + 1) * chunk_lines)
      distill.log        what each run did, with the time: its plan, each chunk translated
                         (lines, seconds, sentences/s), progress lines, the filter's counts
      dropped.tsv        the pairs the filter dropped: rule, source, translation
      distill.lock       held while a run writes the directory (`run_lock`): a second run
                         of the same directory is refused

Each chunk file is written under a temporary name and renamed when whole (`files.atomic_open`),
so a chunk file that exists is finished: a run killed at any point, by SIGKILL too, loses at
most the chunk it was translating, and the next run with the same settings translates only
the chunks without a file. Once all exist, the corpus is assembled: each source line and its
translation, filtered (`filtering`), into OUT.{src_lang} and OUT.{tgt_lang}, each written
under a temporary name first. Every run assembles again, which costs little next to
translating: a finished distillation run again with other filter rules rewrites the corpus
without translating a line.

Lines are translated whole (`split_sentences=False`): a training pair is a line of each side,
usually one sentence; the student should learn how the teacher translates the line it will
be given, and a splitter's mistake (an abbreviation taken for a sentence end) would cut a pair
the teacher translates whole.

Chunks of a few thousand lines: enough for length-sorted batches within a chunk to waste
little on padding, few enough that a kill costs a minute or two of the teacher's time.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from transformer_mt.config import DataConfig
from transformer_mt.data.dataset import stream_pairs
from transformer_mt.data.locations import check_sources, describe_split, split_files
from transformer_mt.distill.filtering import (
    DEFAULT_RULES,
    FilterReport,
    FilterRules,
    TeacherFilter,
)
from transformer_mt.distill.manifest import LOCK_NAME, Manifest, claim_run_dir
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.files import atomic_open, check_folder, check_output
from transformer_mt.inference.languages import Pair, in_direction
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator
from transformer_mt.input_files import checkpoint_input_files
from transformer_mt.progress import PROGRESS_SECONDS, Counted, ProgressReport, duration
from transformer_mt.run_lock import lock_run_dir
from transformer_mt.text_files import read_lines

CHUNKS_DIR = "chunks"
LOG_NAME = "distill.log"
DROPPED_NAME = "dropped.tsv"
# `distill: translated 1200/29000 lines (4%), 120.3 sentences/s, ETA 3m51s`
DISTILLED = Counted(verb="translated", noun="lines", rate_unit="sentences", label="distill")
# Corpus lines a chunk holds, at most: a chunk is read into memory and translated at once.
MAX_CHUNK_LINES = 1_000_000


@dataclass(frozen=True)
class TeacherSettings:
    """How the teacher translates; the manifest records all of it but the device."""

    chunk_lines: int = 2000  # corpus lines per chunk file (see the module)
    device: str = "cpu"
    quantize: str | None = None  # "int8" or "bf16": the teacher's linear layers (CPU)
    # Changes to the checkpoint's decode section, e.g. {"beam_size": 5}.
    decode: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Distilled:
    """What one run of `distill` did."""

    lines: int  # of the corpus
    chunks: int
    reused_chunks: int  # found finished, written by earlier runs
    translated: int  # lines this run translated
    seconds: float  # this run's time translating them (loading and assembling not counted)
    report: FilterReport
    outputs: tuple[Path, Path]  # OUT.{src_lang}, OUT.{tgt_lang}


def distill(
    checkpoint: str | Path,
    data: DataConfig,
    run_dir: str | Path,
    out: str | Path | None = None,
    settings: TeacherSettings = TeacherSettings(),
    rules: FilterRules | None = DEFAULT_RULES,
) -> Distilled:
    """Translate `data.train`'s source side with the teacher `checkpoint` in `run_dir`,
    resuming what an earlier run there left, and write the filtered corpus.

    Args:
        data: its `train` names one corpus (any format), in direction src_lang -> tgt_lang.
        out: the corpus's path prefix (default: run_dir/train): OUT.{src_lang} holds the kept
            source lines, OUT.{tgt_lang} their translations.
        rules: which translations to drop; None keeps every pair.

    Raises:
        TmtError: one line: a corpus that cannot be read or is several, a teacher of another
            direction, a run directory holding something else, an output over an input.
    """
    run_dir = Path(run_dir)
    if not 1 <= settings.chunk_lines <= MAX_CHUNK_LINES:
        raise SettingError(
            "chunk_lines",
            settings.chunk_lines,
            f"must be in [1, {MAX_CHUNK_LINES}] (a chunk's lines are held in memory)",
        )
    teacher_filter = TeacherFilter(rules)  # bad bounds fail here, before the teacher loads
    outputs = _outputs(data, run_dir, out, checkpoint)
    translator = _teacher(checkpoint, settings, data)
    _check_direction(checkpoint, translator, data)
    manifest = Manifest.of(
        checkpoint, data, translator.decode, settings.quantize, settings.chunk_lines
    )
    # One distillation at a time, locked before the directory is claimed: a second had
    # translated the same chunks beside the first, or written its manifest over the first's.
    with lock_run_dir(run_dir, LOCK_NAME, "distillation"):
        claim_run_dir(run_dir, manifest)
        check_folder(run_dir / CHUNKS_DIR, "distill keeps its chunks")
        (run_dir / CHUNKS_DIR).mkdir(exist_ok=True)
        teacher = (translator, teacher_filter)
        return _distill_claimed(run_dir, data, checkpoint, settings, teacher, outputs, manifest)


def _distill_claimed(
    run_dir: Path,
    data: DataConfig,
    checkpoint: str | Path,
    settings: TeacherSettings,
    teacher: tuple[Translator, TeacherFilter],
    outputs: tuple[Path, Path],
    manifest: Manifest,
) -> Distilled:
    """`distill` in its claimed and locked `run_dir`."""
    translator, teacher_filter = teacher
    with open(run_dir / LOG_NAME, "a", encoding="utf-8") as log_file:
        log = _Log(log_file)
        lines = sum(1 for _ in stream_pairs(data, "train"))
        chunks = _Chunks(run_dir / CHUNKS_DIR, lines, settings.chunk_lines)
        todo = chunks.missing()
        log.say(
            f"distilling {lines} lines of {manifest.corpus} ({manifest.direction}) with "
            f"{checkpoint}, beam {translator.decode.beam_size}: {chunks.count} chunk(s) of "
            f"{settings.chunk_lines} lines, {chunks.count - len(todo)} finished before"
        )
        translated, seconds = _translate(translator, data, chunks, todo, log)
        if translated:
            log.say(
                f"translated {translated} lines in {duration(seconds)} "
                f"({translated / max(seconds, 1e-9):.1f} sentences/s)"
            )
        report = _assemble(data, chunks, outputs, run_dir / DROPPED_NAME, teacher_filter)
        log.say(f"{report}; wrote {outputs[0]} and {outputs[1]}")
    return Distilled(
        lines=lines,
        chunks=chunks.count,
        reused_chunks=chunks.count - len(todo),
        translated=translated,
        seconds=seconds,
        report=report,
        outputs=outputs,
    )


def output_paths(
    data: DataConfig, run_dir: str | Path, out: str | Path | None
) -> tuple[Path, Path]:
    """OUT.{src_lang} and OUT.{tgt_lang}, OUT by default run_dir/train.

    Raises:
        SettingError: an OUT that names a folder (empty, `.`, `..`, or ending in a slash): the
            corpus would be hidden files in it (`odir/.de`).
    """
    prefix = str(Path(run_dir) / "train") if out is None else str(out)
    if Path(prefix).name in ("", ".", "..") or prefix.endswith(("/", os.sep)):
        raise SettingError(
            "out",
            repr(prefix),
            f"names a folder, not a prefix; give one such as {str(Path(prefix) / 'train')!r} "
            f"(it writes PREFIX.{data.src_lang} and PREFIX.{data.tgt_lang})",
        )
    return Path(f"{prefix}.{data.src_lang}"), Path(f"{prefix}.{data.tgt_lang}")


def _outputs(
    data: DataConfig, run_dir: Path, out: str | Path | None, checkpoint: str | Path
) -> tuple[Path, Path]:
    """`output_paths`, checked before any work: data.train is one corpus that can be read,
    and neither output would overwrite one of its files, the teacher or a file the teacher
    was made from (`checkpoint_input_files`)."""
    if not isinstance(data.train, str):
        raise TmtError(
            f"data.train: lists {len(data.train)} sources; distill one corpus at a time "
            "(data.train: its path)"
        )
    check_sources(data, ("train",))
    paths = output_paths(data, run_dir, out)
    corpus = [(path, "corpus file") for path in split_files(data, "train")]
    teacher = checkpoint_input_files(checkpoint, "teacher checkpoint")
    for path in paths:
        check_output(path, [*corpus, *teacher])
    return paths


def _teacher(checkpoint: str | Path, settings: TeacherSettings, data: DataConfig) -> Translator:
    """The teacher, for data.train's direction where it has no direction of its own
    (`languages.in_direction`); any other keeps its own, which `_check_direction` checks."""

    def load(direction: Pair) -> Translator:
        lines = LineSettings(src_lang=direction[0], tgt_lang=direction[1], split_sentences=False)
        return Translator.from_checkpoint(
            str(checkpoint),
            device=settings.device,
            quantize=settings.quantize,
            **settings.decode,
            lines=lines,
        )

    return in_direction(load, (data.src_lang, data.tgt_lang), str(checkpoint))


def _check_direction(checkpoint: str | Path, translator: Translator, data: DataConfig) -> None:
    """Refuse a teacher that does not translate data.train's direction."""
    pair = (data.src_lang, data.tgt_lang)
    offered = translator.languages.directions
    if pair not in offered:
        names = ", ".join(f"{src}->{tgt}" for src, tgt in offered)
        raise TmtError(
            f"{checkpoint}: the teacher translates {names}, not {pair[0]}->{pair[1]}, the "
            f"direction of data.train {describe_split(data)!r}; give a teacher of "
            f"{pair[0]}->{pair[1]}, or data in a direction it translates"
        )


@dataclass(frozen=True)
class _Chunks:
    """The chunk files of a corpus of `lines` lines, `size` lines each (the last: the rest)."""

    folder: Path
    lines: int
    size: int

    @property
    def count(self) -> int:
        return math.ceil(self.lines / self.size)

    def path(self, k: int) -> Path:
        return self.folder / f"{k:05d}.txt"

    def length(self, k: int) -> int:
        return min(self.size, self.lines - k * self.size)

    def missing(self) -> list[int]:
        """The chunks not yet translated: those without a file."""
        return [k for k in range(self.count) if not self.path(k).is_file()]

    def translations(self) -> Iterator[str]:
        """Every chunk's lines in corpus order, each chunk checked to hold its lines.

        Raises:
            TmtError: a chunk file of another length (edited by hand), named.
        """
        for k in range(self.count):
            found = read_lines(self.path(k))
            if len(found) != self.length(k):
                raise TmtError(
                    f"{self.path(k)}: {len(found)} lines, not {self.length(k)}; delete it to "
                    "translate its lines again"
                )
            yield from found


def _translate(
    translator: Translator, data: DataConfig, chunks: _Chunks, todo: list[int], log: _Log
) -> tuple[int, float]:
    """Translate and write the chunks `todo`, reading the corpus once and skipping the lines
    of the others; returns the lines translated and the seconds it took."""
    total = sum(chunks.length(k) for k in todo)
    reports = [
        ProgressReport.on_stderr(total, DISTILLED),
        ProgressReport(total, DISTILLED, bar=False, every_s=PROGRESS_SECONDS, stream=log.file),
    ]
    pair = (data.src_lang, data.tgt_lang)
    sources = (src for src, _, _ in stream_pairs(data, "train"))
    wanted = set(todo)
    translated, seconds = 0, 0.0

    def count(n: int) -> None:
        for report in reports:
            report.update(n)

    for k in range(chunks.count):
        lines = list(itertools.islice(sources, chunks.size))
        if k not in wanted:
            continue
        start = time.monotonic()
        found = translator.translate(Texts.of(lines, directions=[pair] * len(lines)), count)
        with atomic_open(chunks.path(k)) as f:
            f.writelines(f"{translation.texts[0]}\n" for translation in found)
        took = time.monotonic() - start
        translated, seconds = translated + len(lines), seconds + took
        for report in reports:
            report.update(translated - report.done)  # empty lines, never searched
        log.say(
            f"chunk {k + 1}/{chunks.count}: {len(lines)} lines in {took:.1f}s "
            f"({len(lines) / max(took, 1e-9):.1f} sentences/s)"
        )
    for report in reports:
        report.close()
    return translated, seconds


def _assemble(
    data: DataConfig,
    chunks: _Chunks,
    outputs: tuple[Path, Path],
    dropped_path: Path,
    teacher_filter: TeacherFilter,
) -> FilterReport:
    """Write the kept (source, translation) pairs to `outputs` and the dropped ones to
    `dropped_path`, each file under a temporary name until all is written."""
    pairs = stream_pairs(data, "train")
    with (
        atomic_open(outputs[0]) as src_out,
        atomic_open(outputs[1]) as tgt_out,
        atomic_open(dropped_path) as dropped,
    ):
        for (source, _, _), translation in zip(pairs, chunks.translations(), strict=True):
            rule = teacher_filter.verdict(source, translation)
            if rule is None:
                src_out.write(f"{source}\n")
                tgt_out.write(f"{translation}\n")
            else:
                dropped.write(f"{rule}\t{source}\t{translation}\n")
    return teacher_filter.report


class _Log:
    """Lines on stderr, and with the time in the run's log file."""

    def __init__(self, file: TextIO):
        self.file = file

    def say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}", file=self.file, flush=True)
