"""Lines in, lines out: chunking, writing translations and progress for `tmt translate`.

The line promises of `tmt translate` that do not depend on the model: one output line per
input line (or exactly n_best lines in n-best format); each chunk is written and flushed as
soon as it is translated. Input lines are decoded by `files.decode_lines` (invalid UTF-8 stops
with the line number).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TextIO

from tqdm import tqdm

from transformer_mt.durations import duration
from transformer_mt.inference.translator import Translation, Translator


def format_translation(translation: Translation, index: int, nbest: int) -> str:
    """One line for 1-best; `index ||| text ||| score` lines (Moses n-best style) otherwise.

    With alignments: the translation, a TAB, then space-separated `src_idx-tgt_idx` pairs.
    """
    if translation.alignment is not None:
        pairs = " ".join(f"{s}-{t}" for s, t in translation.alignment)
        return f"{translation.texts[0]}\t{pairs}"
    if nbest == 1:
        return translation.texts[0]
    return "\n".join(
        f"{index} ||| {text} ||| {score:.4f}"
        for text, score in zip(translation.texts, translation.scores, strict=True)
    )


def translate_stream(
    translator: Translator,
    lines: Iterable[str],
    out: TextIO,
    chunk_lines: int,
    progress: bool = False,
    total: int | None = None,
    collect: list[str] | None = None,
    report_every_s: float | None = None,
    prefixes: Sequence[str] | None = None,
) -> int:
    """Translate `lines` in chunks of `chunk_lines`, writing (and flushing) each chunk.

    `chunk_lines=1` gives interactive line-by-line behaviour on a terminal; a large chunk
    lets length-sorted batching keep padding low. The best translations are appended to
    `collect` when given (for scoring). Returns the number of lines translated.

    Args:
        progress: draw a tqdm bar on stderr (a terminal).
        report_every_s: without a bar, write a plain progress line on stderr at most this
            often (a log file, where a bar is switched off and would be unreadable); None: none.
        prefixes: one target prefix per line that its translation must start with.
    """
    count = 0
    report = ProgressReport(total, progress, report_every_s)
    for chunk in _chunks(lines, chunk_lines):
        forced = None if prefixes is None else prefixes[count : count + len(chunk)]
        for translation in translator.translate(chunk, report.update, forced):
            print(format_translation(translation, count, translator.decode.n_best), file=out)
            if collect is not None:
                collect.append(translation.texts[0])
            count += 1
        out.flush()
        report.update(count - report.done)  # the chunk's empty lines, never searched
    report.close()
    return count


class ProgressReport:
    """Lines translated so far, on stderr: a tqdm bar, or plain lines for a log file.

    A plain line reads `translated 1200/5000 lines (24%), 41.3 sentences/s, ETA 1m32s`, written
    when at least `every_s` seconds have passed since the last one (the first after `every_s`),
    so short inputs print nothing but the caller's final count.
    """

    def __init__(
        self,
        total: int | None,
        bar: bool,
        every_s: float | None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = None if bar else every_s
        self.clock = clock
        self.bar = tqdm(total=total, unit="line", disable=not bar, file=self.stream)
        self.done = 0
        self.start = self.last = clock()

    def update(self, n: int) -> None:
        self.bar.update(n)
        self.done += n
        now = self.clock()
        if self.every_s is not None and n and now - self.last >= self.every_s:
            self.last = now
            print(self.line(now - self.start), file=self.stream, flush=True)

    def line(self, elapsed: float) -> str:
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.total is None:
            return f"translated {self.done} lines, {rate:.1f} sentences/s"
        percent = 100.0 * self.done / max(self.total, 1)
        eta = duration((self.total - self.done) / rate) if rate > 0 else "unknown"
        return (
            f"translated {self.done}/{self.total} lines ({percent:.0f}%), "
            f"{rate:.1f} sentences/s, ETA {eta}"
        )

    def close(self) -> None:
        self.bar.close()


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
