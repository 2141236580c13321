"""Glossaries: term usage, BLEU and chrF with and without a glossary, a synonym control, and
the speed of constrained search.

    python scripts/bench_glossary.py --checkpoint CKPT [--data DIR] [--min-count 20]
        [--min-dice 0.5] [--batch-size 64] [--beam-size 5]

Built without looking at any model output:

1) Term pairs from the training corpus alone (train.de / train.en): German nouns (words
   capitalised in at least 90% of their occurrences after a sentence's first word: German
   capitalises nouns, and terminology is mostly nouns) in at least --min-count training
   sentences, each paired with the English word of highest Dice coefficient over sentence
   co-occurrence, 2 c(d, e) / (c(d) + c(e)) with c the number of sentences holding the
   lowercased words (Smadja et al. 1996), kept when the pairing is mutual (the German word is
   also the English word's best) and the coefficient is at least --min-dice. The source term
   is the noun's most frequent spelling, the target term the lowercased English word.
2) The terminology set: the test2016 sentences where a source term occurs (`Glossary`,
   matched at word boundaries, case as spelled) and the reference holds its target term
   (whole word, any case), each sentence with those terms; the glossary's targets are its
   constraints. Term usage rate: the share of those target terms present in the output
   (whole word, any case); beside it the share present at a word start, which also counts a
   term the model went on with a piece that continues the word ("dog" in "dogs": beam
   search meets a constraint by its pieces, search/constraints.py). BLEU and chrF on the
   set, without and with the glossary, and on all of test2016 (the glossary applied where it
   applies).
3) The control: a glossary asking for a non-default translation of frequent words
   (`SYNONYMS`, chosen by hand from English usage, not from outputs), applied to every test
   sentence holding the source word; its usage rate shows whether the model obeys.
4) Speed: sentences a second over each set without and with its constraints, in batches of
   --batch-size sentences of similar length (sorted by source length), beam --beam-size, the
   fastest of --repeats passes, on the torch threads the process has (pin it:
   `OMP_NUM_THREADS=1 taskset -c 0`).

`scripts/benchmark.py glossary` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled

from bench_machine import (  # noqa: E402
    conditions_text,
    print_markdown_table,
    run_conditions,
    run_standalone,
)

from transformer_mt.evaluation import corpus_scores  # noqa: E402
from transformer_mt.inference.glossary import Glossary  # noqa: E402
from transformer_mt.inference.line_settings import LineSettings  # noqa: E402
from transformer_mt.inference.requests import Texts  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.text_files import read_lines  # noqa: E402

DEFAULT_DATA = REPO / "data" / "multi30k"
WORD = re.compile(r"\w+")
# Frequent Multi30k nouns and an English word a client might prefer to the usual one.
SYNONYMS = {
    "Mann": "guy",
    "Frau": "lady",
    "Hund": "puppy",
    "Straße": "road",
    "Kind": "kid",
    "Männer": "guys",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of SPLIT.LANG")
    parser.add_argument("--min-count", type=int, default=20, help="training sentences a term")
    parser.add_argument("--min-dice", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=64, help="sentences a batch")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes; the best counts")


def extract_terms(
    sources: Sequence[str], targets: Sequence[str], min_count: int, min_dice: float
) -> list[tuple[str, str, float]]:
    """(source noun, target word, Dice) pairs of a parallel corpus, most frequent first, then
    in alphabetical order (module docstring, step 1)."""
    source_counts, target_counts, pair_counts = Counter(), Counter(), Counter()
    spellings, capitalised, inside = Counter(), Counter(), Counter()
    for source, target in zip(sources, targets, strict=True):
        words = WORD.findall(source)
        for word in words[1:]:
            inside[word.lower()] += 1
            capitalised[word.lower()] += word[0].isupper()
            spellings[word] += 1
        source_words = {w.lower() for w in words}
        target_words = {w.lower() for w in WORD.findall(target)}
        source_counts.update(source_words)
        target_counts.update(target_words)
        pair_counts.update((s, t) for s in source_words for t in target_words)
    best_target: dict[str, tuple[float, str]] = {}
    best_source: dict[str, tuple[float, str]] = {}
    for (s, t), count in pair_counts.items():
        dice = 2 * count / (source_counts[s] + target_counts[t])
        best_target[s] = max(best_target.get(s, (0.0, "")), (dice, t))
        best_source[t] = max(best_source.get(t, (0.0, "")), (dice, s))
    spelled = {}
    for word, _ in spellings.most_common():
        spelled.setdefault(word.lower(), word)
    terms = []
    for s, (dice, t) in best_target.items():
        noun = inside[s] and capitalised[s] >= 0.9 * inside[s]
        mutual = best_source[t][1] == s
        if noun and mutual and len(s) > 1 and source_counts[s] >= min_count and dice >= min_dice:
            terms.append((spelled[s], t, dice, source_counts[s]))
    terms.sort(key=lambda term: (-term[3], term[0]))
    return [(s, t, round(dice, 3)) for s, t, dice, _ in terms]


def holds(text: str, term: str, whole: bool = True) -> bool:
    """`term` in `text`, any case, as a whole word (`whole`) or at a word start (a word it
    begins: "dog" in "dogs")."""
    end = r"(?!\w)" if whole else ""
    return re.search(rf"(?<!\w){re.escape(term)}{end}", text, re.IGNORECASE) is not None


def term_sets(
    glossary: Glossary, sources: Sequence[str], references: Sequence[str] | None
) -> list[list[str]]:
    """Per sentence, the targets of the glossary's terms found in it; with `references`, only
    those its reference holds (module docstring, step 2)."""
    found = [glossary.targets(source) for source in sources]
    if references is None:
        return found
    return [[t for t in ts if holds(r, t)] for ts, r in zip(found, references, strict=True)]


def translate_timed(
    translator: Translator,
    sources: Sequence[str],
    constraints: Sequence[Sequence[str]] | None,
    batch_size: int,
    repeats: int = 1,
) -> tuple[list[str], float]:
    """The best translations of `sources` (with their `constraints`), searched in batches of
    `batch_size` sentences of similar length, and the seconds of the fastest of `repeats`
    passes. The translator's max_tokens must hold a batch (`run` makes it unbounded)."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    outputs = [""] * len(sources)
    fastest = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for first in range(0, len(order), batch_size):
            chunk = order[first : first + batch_size]
            phrases = None if constraints is None else [constraints[i] for i in chunk]
            found = translator.translate(Texts.of([sources[i] for i in chunk], constraints=phrases))
            for i, translation in zip(chunk, found, strict=True):
                outputs[i] = translation.texts[0]
        fastest = min(fastest, time.perf_counter() - start)
    return outputs, fastest


def compare(
    translator: Translator,
    name: str,
    sources: Sequence[str],
    references: Sequence[str],
    wanted: Sequence[Sequence[str]],
    batch_size: int,
    repeats: int,
) -> list[dict]:
    """Two rows for one set of sentences: translated without and with their constraints
    `wanted`; the usage rate counts the `wanted` terms present in the outputs either way.
    No rows for no sentences."""
    rows = []
    if not sources:
        return rows
    for glossary in (False, True):
        outputs, seconds = translate_timed(
            translator, sources, wanted if glossary else None, batch_size, repeats
        )
        pairs = [(out, t) for out, ts in zip(outputs, wanted, strict=True) for t in ts]
        used = sum(holds(out, t) for out, t in pairs)
        started = sum(holds(out, t, whole=False) for out, t in pairs)
        total = len(pairs)
        bleu, chrf = corpus_scores(outputs, list(references), ["bleu", "chrf"])
        row = {
            "bench": "glossary",
            "set": name,
            "glossary": glossary,
            "sentences": len(sources),
            "terms": total,
            "usage": round(100 * used / total, 1) if total else None,
            "usage_start": round(100 * started / total, 1) if total else None,
            "bleu": round(bleu.score, 2),
            "chrf": round(chrf.score, 2),
            "seconds": round(seconds, 1),
            "sentences_per_s": round(len(sources) / seconds, 1),
            "beam_size": translator.decode.beam_size,
            "batch_size": batch_size,
            "repeats": repeats,
            **run_conditions(),
        }
        print(row, file=sys.stderr, flush=True)  # progress: a run takes minutes
        rows.append(row)
    return rows


def with_terms(
    sources: Sequence[str], references: Sequence[str], wanted: Sequence[Sequence[str]]
) -> tuple[list[str], list[str], list[Sequence[str]]]:
    """The sentences of `sources` that have terms in `wanted`: theirs, their references and
    their terms."""
    chosen = [i for i, terms in enumerate(wanted) if terms]
    return (
        [sources[i] for i in chosen],
        [references[i] for i in chosen],
        [wanted[i] for i in chosen],
    )


def run(args: argparse.Namespace) -> list[dict]:
    """Rows: the extracted terms, then without / with the glossary on the terminology set,
    all of test2016 and the synonym control."""
    data = args.data
    terms = extract_terms(
        read_lines(data / "train.de"), read_lines(data / "train.en"), args.min_count, args.min_dice
    )
    glossary = Glossary.of_pairs([(s, t) for s, t, _ in terms], origin="extracted terms")
    sources, references = read_lines(data / "test2016.de"), read_lines(data / "test2016.en")
    translator = Translator.from_checkpoint(
        str(args.checkpoint),
        beam_size=args.beam_size,
        n_best=1,
        max_tokens=10**9,  # batches of --batch-size sentences, not of a token budget
        lines=LineSettings(split_sentences=False),  # whole lines, with or without constraints
    )
    rows = [{"bench": "glossary", "set": "extracted", "pairs": len(terms), "first": terms[:20]}]
    wanted = term_sets(glossary, sources, references)
    asked = term_sets(Glossary.of_pairs(SYNONYMS.items(), origin="synonyms"), sources, None)
    sets = [
        ("terms", *with_terms(sources, references, wanted)),
        ("test2016", sources, references, wanted),
        ("synonyms", *with_terms(sources, references, asked)),
    ]
    for name, set_sources, set_references, set_terms in sets:
        rows += compare(
            translator, name, set_sources, set_references, set_terms, args.batch_size, args.repeats
        )
    for row in rows[1:]:
        row["checkpoint"] = str(args.checkpoint)
    return rows


def print_table(results: list[dict], file=sys.stdout) -> None:
    """Usage, BLEU, chrF and speed per set, without and with the glossary."""
    extracted = results[0]
    pairs = ", ".join(f"{s}={t}" for s, t, _ in extracted["first"][:12])
    print(f"{extracted['pairs']} term pairs extracted, most frequent: {pairs}", file=file)
    headers = ["set", "glossary", "sentences", "terms", "term usage %", "at a word start %"]
    headers += ["BLEU", "chrF", "sentences/s"]
    rows = [
        [r["set"], "yes" if r["glossary"] else "no", r["sentences"], r["terms"], r["usage"]]
        + [r["usage_start"], r["bleu"], r["chrf"], r["sentences_per_s"]]
        for r in results[1:]
    ]
    print_markdown_table(headers, "llrrrrrrr", rows, file)
    last = results[-1]
    print(
        f"{last['checkpoint']}, beam {last['beam_size']}, batches of {last['batch_size']} "
        f"sentences, best of {last['repeats']} pass(es), {conditions_text(last)}",
        file=file,
    )


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
