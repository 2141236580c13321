"""Sentence splitters on joined Multi30k captions: exact recovery, boundaries, speed, size.

    python scripts/bench_splitters.py [--data DIR] [--split test2016] [--langs en de fr cs ja]
        [--joins 1 2 4 8] [--splitters sentencex pysbd ...] [--repeats 3]

Our models translate single sentences, so a line holding a paragraph is split before it is
searched. This measures which splitter gives back the sentences a paragraph was
made of. Consecutive sentences of DIR/SPLIT.LANG (or .gz) are joined N to a line with one
space (Japanese: with nothing, as Japanese is written; small_parallel_enja's `test.ja`, split
into words by spaces, is first put back together) and every line is split by each splitter
of `SPLITTERS` that is installed (one that is not becomes a row saying so):

    sentencex          wikimedia's sentencex (Rust), the language's own rules
    pysbd              pySBD, its language's rules (English rules for one it lacks)
    blingfire          Bling Fire's text_to_sentences, one model for every language
    sentence-splitter  the Moses splitter's port, the language's non-breaking prefixes
                       (English ones for a language it lacks)
    syntok             syntok's segmenter, rules for English, German and Spanish

Per splitter, language and N (and `all`, the languages pooled): `exact`, the share of lines
split into exactly their sentences (N = 1: a caption left whole); boundary precision and
recall, a boundary being the number of non-space characters before it (so that a splitter
that rewrites whitespace is not blamed for it); lines and sentences per second, the best of
--repeats passes, one line per call (pin the process to one core: `OMP_NUM_THREADS=1 taskset
-c 1`); and the first line it got wrong. Per splitter also the size of its installed files.
`scripts/benchmark.py splitters` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled

from bench_libraries import library_fields, print_footer, share, time_per_line  # noqa: E402
from bench_machine import load_average, print_markdown_table, run_standalone  # noqa: E402

from transformer_mt.inference.paragraphs import sentence_groups  # noqa: E402
from transformer_mt.text_files import read_lines  # noqa: E402

DEFAULT_DATA = REPO / "data" / "multi30k"
SHARED = REPO.parent / "shared" / "data"
# Japanese is not in Multi30k: the test set of small_parallel_enja, if it is there.
JAPANESE = SHARED / "small_parallel_enja" / "test.ja.gz"

Split = Callable[[str], list[str]]  # a line -> its sentences
TERMINALS = (".", "!", "?", "…", "。", "！", "？")  # sentence-final marks
CLOSING = "\"'»”’)"  # what may follow a sentence-final mark


@dataclass(frozen=True)
class Splitter:
    """One splitter: how to build it for a language, and which languages have rules of their
    own in it (None: one model for all, or rules it chooses itself)."""

    module: str  # import name: the splitter is skipped when it cannot be found
    distribution: str  # the pip name, whose installed files are counted
    build: Callable[[str], Split]  # the language its rules are for -> split
    languages: Callable[[], set[str]] | None = None


def _build_sentencex(lang: str) -> Split:
    from sentencex import segment

    return lambda text: segment(lang, text)


def _pysbd_languages() -> set[str]:
    from pysbd.languages import LANGUAGE_CODES

    return set(LANGUAGE_CODES)


def _build_pysbd(lang: str) -> Split:
    from pysbd import Segmenter

    return Segmenter(language=lang, clean=False).segment


def _build_blingfire(lang: str) -> Split:
    from blingfire import text_to_sentences

    return lambda text: text_to_sentences(text).split("\n")


def _splitter_languages() -> set[str]:
    import sentence_splitter

    prefixes = Path(sentence_splitter.__file__).parent / "non_breaking_prefixes"
    return {path.stem for path in prefixes.glob("*.txt")}


def _build_sentence_splitter(lang: str) -> Split:
    from sentence_splitter import SentenceSplitter

    return SentenceSplitter(language=lang).split


def _build_syntok(lang: str) -> Split:
    from syntok.segmenter import process

    def split(text: str) -> list[str]:
        sentences = itertools.chain.from_iterable(process(text))
        return ["".join(token.spacing + token.value for token in s) for s in sentences]

    return split


SPLITTERS = {
    "sentencex": Splitter("sentencex", "sentencex", _build_sentencex),
    "pysbd": Splitter("pysbd", "pysbd", _build_pysbd, _pysbd_languages),
    "blingfire": Splitter("blingfire", "blingfire", _build_blingfire),
    "sentence-splitter": Splitter(
        "sentence_splitter", "sentence-splitter", _build_sentence_splitter, _splitter_languages
    ),
    "syntok": Splitter("syntok", "syntok", _build_syntok),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of SPLIT.LANG")
    parser.add_argument("--split", default="test2016")
    parser.add_argument("--langs", nargs="+", default=["en", "de", "fr", "cs", "ja"])
    parser.add_argument("--joins", type=int, nargs="+", default=[1, 2, 4, 8], metavar="N")
    parser.add_argument("--splitters", nargs="+", choices=SPLITTERS, default=list(SPLITTERS))
    parser.add_argument("--repeats", type=int, default=3, help="timed passes; the best counts")


@dataclass
class Tally:
    """Split lines against the sentences they were made of.

    A boundary is *marked* when the sentence before it ends in a sentence-final mark
    (`TERMINALS`, before closing quotes): about 5% of Multi30k captions end without one, and
    no splitter can see where such a caption ends and the next begins. A marked line has only
    marked boundaries; its exact recovery is what a splitter can be asked for.
    """

    lines: int = 0
    exact: int = 0
    marked_lines: int = 0
    marked_exact: int = 0
    boundaries: int = 0  # between the sentences of a line
    marked: int = 0  # of which marked
    found: int = 0  # between the pieces the splitter gave
    right: int = 0  # found where there is one
    marked_right: int = 0  # found where there is a marked one
    first_wrong: list[str] | None = None  # the pieces of the first marked line split wrong

    def add(self, sentences: list[str], pieces: list[str]) -> None:
        pieces = [piece.strip() for piece in pieces if piece.strip()]
        truth, guess = _boundaries(sentences), _boundaries(pieces)
        marked = _boundaries(sentences, only_marked=True)
        exact = pieces == [s.strip() for s in sentences]
        self.lines += 1
        self.exact += exact
        self.marked_lines += len(marked) == len(truth)
        self.marked_exact += len(marked) == len(truth) and exact
        self.boundaries += len(truth)
        self.marked += len(marked)
        self.found += len(guess)
        self.right += len(truth & guess)
        self.marked_right += len(marked & guess)
        if self.first_wrong is None and len(marked) == len(truth) and not exact:
            self.first_wrong = pieces

    def merge(self, other: Tally) -> None:
        for name in [f.name for f in dataclasses.fields(self) if f.name != "first_wrong"]:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.first_wrong = self.first_wrong or other.first_wrong

    def as_row(self) -> dict:
        return {
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
            "exact_share": share(self.exact, self.lines),
            "marked_exact_share": share(self.marked_exact, self.marked_lines),
            "precision": share(self.right, self.found),
            "recall": share(self.right, self.boundaries),
            "marked_recall": share(self.marked_right, self.marked),
        }


def _boundaries(pieces: list[str], only_marked: bool = False) -> set[int]:
    """Where one piece ends and the next starts, as the number of non-space characters before;
    `only_marked`: only after pieces that end in a sentence-final mark."""
    ends = itertools.accumulate(len("".join(piece.split())) for piece in pieces[:-1])
    return {
        end
        for end, piece in zip(ends, pieces, strict=False)
        if not only_marked or piece.rstrip().rstrip(CLOSING).endswith(TERMINALS)
    }


def measure(
    split: Split, sentences: list[str], joins: list[int], separator: str, repeats: int
) -> list[tuple[Tally, float]]:
    """Per join N of `joins`: the tally of splitting lines of N sentences joined by
    `separator`, and the best seconds of `repeats` passes over them."""
    found = []
    for n in joins:
        groups = sentence_groups(sentences, n)
        lines = [separator.join(group) for group in groups]
        pieces, best = time_per_line(split, lines, repeats)
        tally = Tally()
        for group, line_pieces in zip(groups, pieces, strict=True):
            tally.add(group, line_pieces)
        found.append((tally, best))
    return found


def _sentences(data: Path, split: str, lang: str) -> tuple[list[str], str] | None:
    """A language's sentences and the separator that joins them; None when there are none."""
    if lang == "ja":
        if not JAPANESE.exists():
            return None
        return ["".join(line.split()) for line in read_lines(JAPANESE)], ""
    for folder in (data, SHARED / "multi30k"):
        for path in (folder / f"{split}.{lang}", folder / f"{split}.{lang}.gz"):
            if path.exists():
                return read_lines(path), " "
    return None


def run(args: argparse.Namespace) -> list[dict]:
    """One row per splitter, language (and `all`) and join, or one per skipped splitter."""
    corpora = {lang: _sentences(args.data, args.split, lang) for lang in args.langs}
    for lang in [lang for lang, corpus in corpora.items() if corpus is None]:
        print(f"splitters: no {args.split}.{lang} sentences, skipping {lang}", file=sys.stderr)
        del corpora[lang]
    results: list[dict] = []
    for name in args.splitters:
        splitter = SPLITTERS[name]
        fields = library_fields(
            "splitters", "splitter", name, splitter.module, splitter.distribution
        )
        if "skipped" in fields:
            results.append(fields)
            continue
        known = None if splitter.languages is None else splitter.languages()
        common = {**fields, "split": args.split}
        pooled = {n: (Tally(), 0.0) for n in args.joins}
        for lang, (sentences, separator) in corpora.items():
            rules = lang if known is None or lang in known else "en"
            measured = measure(
                splitter.build(rules), sentences, args.joins, separator, args.repeats
            )
            for n, (tally, seconds) in zip(args.joins, measured, strict=True):
                results.append(_row(common, lang, rules, n, tally, seconds))
                pooled[n][0].merge(tally)
                pooled[n] = (pooled[n][0], pooled[n][1] + seconds)
        for n, (tally, seconds) in pooled.items():
            results.append(_row(common, "all", "", n, tally, seconds))
    return results


def _row(common: dict, lang: str, rules: str, n: int, tally: Tally, seconds: float) -> dict:
    return {
        **common,
        "lang": lang,
        "rules": rules,
        "join": n,
        **tally.as_row(),
        "lines_per_s": round(tally.lines / seconds) if seconds else None,
        "sentences_per_s": round(tally.lines * n / seconds) if seconds else None,
        "load": load_average(),
    }


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}"


def print_table(results: list[dict], file=sys.stdout) -> None:
    """Exact recovery of marked lines per splitter and join (languages pooled), then per
    language, then the first marked line each splitter got wrong at the largest join."""
    measured = [row for row in results if "skipped" not in row]
    joins = sorted({row["join"] for row in measured})
    by_key = {(row["splitter"], row["lang"], row["join"]): row for row in measured}
    splitters = list(dict.fromkeys(row["splitter"] for row in measured))
    langs = [lang for lang in dict.fromkeys(row["lang"] for row in measured) if lang != "all"]
    if measured:
        first, last = joins[0], joins[-1]
        headers = ["splitter", *(f"exact % N={n}" for n in joins), f"all lines N={last}"]
        headers += [f"P / R % N={last}", f"lines/s N={first}", f"lines/s N={last}", "install MB"]
        rows = []
        for name in splitters:
            pooled = [by_key[name, "all", n] for n in joins]
            top = pooled[-1]
            rows.append(
                [name, *(_percent(row["marked_exact_share"]) for row in pooled)]
                + [_percent(top["exact_share"])]
                + [f"{_percent(top['precision'])} / {_percent(top['marked_recall'])}"]
                + [pooled[0]["lines_per_s"], top["lines_per_s"], top["install_mb"]]
            )
        print_markdown_table(headers, "l" + "r" * (len(headers) - 1), rows, file)
        print(file=file)
        headers = ["splitter", "lang", "rules", *(f"N={n}" for n in joins), f"wrong at N={last}"]
        rows = []
        for name, lang in itertools.product(splitters, langs):
            cells = [by_key[name, lang, n] for n in joins]
            wrong = cells[-1]["marked_lines"] - cells[-1]["marked_exact"]
            rows.append(
                [name, lang, cells[0]["rules"], *(_percent(c["marked_exact_share"]) for c in cells)]
                + [f"{wrong}/{cells[-1]['marked_lines']}"]
            )
        print_markdown_table(headers, "lll" + "r" * (len(headers) - 3), rows, file)
        print(file=file)
        for name, lang in itertools.product(splitters, langs):
            if by_key[name, lang, last]["first_wrong"]:
                print(f"{name} {lang}: {by_key[name, lang, last]['first_wrong']}", file=file)
    print_footer(results, "splitter", file)


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
