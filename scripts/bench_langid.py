"""Offline language identifiers on Multi30k captions: accuracy, confusions, short lines, speed.

    python scripts/bench_langid.py [--data DIR] [--splits test2016 valid] [--langs en de fr cs]
        [--identifiers lingua-restricted lingua-all ...] [--short-words 5] [--repeats 3]

Every line of DIR/SPLIT.LANG is labelled by each identifier in `IDENTIFIERS` that is installed
(one that is not becomes a row saying so, and the run goes on):

    lingua-restricted      lingua-language-detector choosing among --langs only
    lingua-all             lingua-language-detector over all its languages
    langid-restricted      langid.py after `set_languages(--langs)`
    langid-all             langid.py over all its languages
    langdetect-restricted  langdetect with only the --langs profiles loaded, seed 0
    langdetect-all         langdetect with all its profiles, seed 0

lingua preloads its models, so that building it (after the untimed import) is timed as
`load_s` and not in the first lines. Per identifier, split and language (and `all`, the
languages pooled): accuracy, the share of lines labelled as their own language; the same over
lines of at most --short-words whitespace-separated words and over longer ones; the wrong
labels with their counts (`?`: no answer); and milliseconds per line, the best of --repeats
passes over the language's lines, one line per call (pin the process to one core:
`OMP_NUM_THREADS=1 taskset -c 0`). Per identifier also: the seconds and resident MiB its
construction took and the size of its installed files (its wheel's, not its dependencies').
`scripts/benchmark.py langid` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled

from bench_libraries import library_fields, print_footer, share, time_per_line  # noqa: E402
from bench_machine import load_average, print_markdown_table, run_standalone  # noqa: E402

from transformer_mt.text_files import read_lines  # noqa: E402

DEFAULT_DATA = REPO / "data" / "multi30k"

Identify = Callable[[str], "str | None"]  # a line -> its ISO 639-1 code, None when undecided


@dataclass(frozen=True)
class Identifier:
    """One identifier and its setting: how to build it for the benchmark's languages."""

    module: str  # import name: the identifier is skipped when it cannot be found
    distribution: str  # the pip name, whose installed files are counted
    build: Callable[[list[str] | None], tuple[Identify, int]]  # -> (identify, languages known)
    restricted: bool  # built for the benchmark's languages only, else for all it knows


def _build_lingua(langs: list[str] | None) -> tuple[Identify, int]:
    from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

    if langs is None:
        builder, known = LanguageDetectorBuilder.from_all_languages(), len(Language.all())
    else:
        codes = [IsoCode639_1.from_str(code) for code in langs]
        builder, known = LanguageDetectorBuilder.from_iso_codes_639_1(*codes), len(codes)
    detector = builder.with_preloaded_language_models().build()

    def identify(text: str) -> str | None:
        language = detector.detect_language_of(text)
        return None if language is None else language.iso_code_639_1.name.lower()

    return identify, known


def _build_langid(langs: list[str] | None) -> tuple[Identify, int]:
    from langid.langid import LanguageIdentifier, model

    identifier = LanguageIdentifier.from_modelstring(model)  # our own, not the module's global
    if langs is not None:
        identifier.set_languages(langs)
    return (lambda text: identifier.classify(text)[0]), len(identifier.nb_classes)


def _build_langdetect(langs: list[str] | None) -> tuple[Identify, int]:
    from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory
    from langdetect.lang_detect_exception import LangDetectException

    # Our own factory rather than the module's global one: `seed` makes its sampling repeatable.
    factory = DetectorFactory()
    factory.seed = 0
    if langs is None:
        factory.load_profile(PROFILES_DIRECTORY)
    else:
        profiles = [(Path(PROFILES_DIRECTORY) / code).read_text("utf-8") for code in langs]
        factory.load_json_profile(profiles)

    def identify(text: str) -> str | None:
        detector = factory.create()
        detector.append(text)
        try:
            return detector.detect()
        except LangDetectException:  # no letters it knows
            return None

    return identify, len(factory.get_lang_list())


IDENTIFIERS = {
    "lingua-restricted": Identifier("lingua", "lingua-language-detector", _build_lingua, True),
    "lingua-all": Identifier("lingua", "lingua-language-detector", _build_lingua, False),
    "langid-restricted": Identifier("langid", "langid", _build_langid, True),
    "langid-all": Identifier("langid", "langid", _build_langid, False),
    "langdetect-restricted": Identifier("langdetect", "langdetect", _build_langdetect, True),
    "langdetect-all": Identifier("langdetect", "langdetect", _build_langdetect, False),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of SPLIT.LANG")
    parser.add_argument("--splits", nargs="+", default=["test2016"], help="e.g. test2016 valid")
    parser.add_argument("--langs", nargs="+", default=["en", "de", "fr", "cs"])
    parser.add_argument("--identifiers", nargs="+", choices=IDENTIFIERS, default=list(IDENTIFIERS))
    parser.add_argument("--short-words", type=int, default=5, help="a short line has at most N")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes; the best counts")


@dataclass
class Tally:
    """Labels against the truth for a set of lines, split by length."""

    lines: int = 0
    correct: int = 0
    short_lines: int = 0
    short_correct: int = 0
    confusion: Counter = field(default_factory=Counter)  # wrong label ("?" for none) -> lines

    def add(self, lang: str, texts: list[str], labels: list[str | None], short_words: int) -> None:
        for text, label in zip(texts, labels, strict=True):
            short = len(text.split()) <= short_words
            right = label == lang
            self.lines += 1
            self.correct += right
            self.short_lines += short
            self.short_correct += short and right
            if not right:
                self.confusion["?" if label is None else label] += 1

    def merge(self, other: Tally) -> None:
        self.lines += other.lines
        self.correct += other.correct
        self.short_lines += other.short_lines
        self.short_correct += other.short_correct
        self.confusion.update(other.confusion)

    def as_row(self) -> dict:
        long_lines, long_correct = self.lines - self.short_lines, self.correct - self.short_correct
        return {
            "lines": self.lines,
            "correct": self.correct,
            "accuracy": share(self.correct, self.lines),
            "short_lines": self.short_lines,
            "short_correct": self.short_correct,
            "short_accuracy": share(self.short_correct, self.short_lines),
            "long_lines": long_lines,
            "long_correct": long_correct,
            "long_accuracy": share(long_correct, long_lines),
            "confusion": dict(self.confusion.most_common()),
        }


def run(args: argparse.Namespace) -> list[dict]:
    """One row per identifier, split and language (and `all`), or one row per skipped identifier."""
    texts = {
        (split, lang): read_lines(args.data / f"{split}.{lang}")
        for split in args.splits
        for lang in args.langs
    }
    results: list[dict] = []
    for name in args.identifiers:
        identifier = IDENTIFIERS[name]
        # imported by library_fields: the first of two settings pays no more for it
        fields = library_fields(
            "langid", "identifier", name, identifier.module, identifier.distribution
        )
        if "skipped" in fields:
            results.append(fields)
            continue
        rss_before, start = _resident_mib(), time.perf_counter()
        identify, known = identifier.build(args.langs if identifier.restricted else None)
        common = {
            **fields,
            "languages": known,
            "load_s": round(time.perf_counter() - start, 3),
            "load_mib": _difference(_resident_mib(), rss_before),
        }
        for split in args.splits:
            split_texts = {lang: texts[split, lang] for lang in args.langs}
            rows = measure(identify, split_texts, args.short_words, args.repeats)
            results.extend({**common, "split": split, **row} for row in rows)
        del identify  # free one identifier's models before the next is built
    return results


def measure(
    identify: Identify, texts: dict[str, list[str]], short_words: int, repeats: int
) -> list[dict]:
    """Rows of accuracy, confusion and ms per line for each language of `texts`, then `all`.

    Args:
        identify: a line -> the ISO 639-1 code of its language, or None for no answer.
        texts: language code -> the lines written in it.
        short_words: lines of at most this many whitespace-separated words count as short.
        repeats: timed passes over each language's lines; the best gives `ms_per_line`.
    """
    rows, pooled, pooled_s = [], Tally(), 0.0
    for lang, lines in texts.items():
        labels, seconds = time_per_line(identify, lines, repeats)
        tally = Tally()
        tally.add(lang, lines, labels, short_words)
        pooled.merge(tally)
        pooled_s += seconds
        rows.append({"lang": lang, **tally.as_row(), "ms_per_line": _ms(seconds, len(lines))})
    total = sum(len(lines) for lines in texts.values())
    rows.append({"lang": "all", **pooled.as_row(), "ms_per_line": _ms(pooled_s, total)})
    for row in rows:
        row.update(short_words=short_words, load=load_average())
    return rows


def _ms(seconds: float, lines: int) -> float | None:
    return round(1000 * seconds / lines, 4) if lines else None


def _resident_mib() -> float | None:
    """This process's resident memory now (Linux), to see what building an identifier holds."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _difference(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else round(after - before, 1)


def _percent(row: dict, key: str, count: bool = False) -> str:
    share = row[f"{key}accuracy"]
    if share is None:
        return "-"
    text = f"{100 * share:.1f}"
    return f"{text} ({row[f'{key}correct']}/{row[f'{key}lines']})" if count else text


def _confused(row: dict, top: int = 4) -> str:
    pairs = list(row["confusion"].items())
    text = ", ".join(f"{label} {n}" for label, n in pairs[:top]) or "-"
    return text + (f", {len(pairs) - top} more" if len(pairs) > top else "")


def print_table(results: list[dict], file=sys.stdout) -> None:
    """A summary per identifier and split (the `all` rows), then every language's row."""
    measured = [row for row in results if "skipped" not in row]
    pooled = [row for row in measured if row["lang"] == "all"]
    if pooled:
        short = f"≤{pooled[0]['short_words']} words"
        headers = ["identifier", "languages", "split", "accuracy %", short, "longer"]
        headers += ["ms/line", "load s", "load MiB", "install MB"]
        rows = [
            [row["identifier"], row["languages"], row["split"], _percent(row, "")]
            + [_percent(row, "short_", count=True), _percent(row, "long_"), row["ms_per_line"]]
            + [row["load_s"], row["load_mib"], row["install_mb"]]
            for row in pooled
        ]
        print_markdown_table(headers, "lrlrrrrrrr", rows, file)
        print(file=file)
        headers = ["identifier", "split", "lang", "accuracy %", short, "longer", "wrong labels"]
        rows = [
            [row["identifier"], row["split"], row["lang"], _percent(row, "")]
            + [_percent(row, "short_", count=True), _percent(row, "long_"), _confused(row)]
            for row in measured
            if row["lang"] != "all"
        ]
        print_markdown_table(headers, "lllrrrl", rows, file)
    print_footer(results, "identifier", file)


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
