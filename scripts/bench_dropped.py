"""Dropped content: precision and recall of the check's flags on test sentences joined to a line
and translated whole, what its retry wins back, and what the check costs.

    python scripts/bench_dropped.py --checkpoint CKPT [--src FILE --ref FILE]
        [--joins 2 3 4] [--batch-size 64] [--beam-size K]

1) The set: every sentence of --src alone (negatives: its translation is the yardstick), and
   consecutive sentences joined n to a line by a space for each n of --joins, translated with
   splitting off (`Translator(split_sentences=False)`, `tmt translate --no-split`): our models
   learn from single sentences and often drop the later ones of a line (docs/results.md).
2) Labels, from the model's own single-sentence translations, never from the check: a joined
   line dropped content when its translation is shorter than LENGTH_SHARE of its sentences'
   translations joined (in characters), or when one of those translations has fewer than
   WORD_SHARE of its words (lowercased, with their counts) in the line's translation: a
   sentence left out, or two sentences merged into one that keeps half of each.
3) Flags: `dropped.check_translations` with the default thresholds, on every (source,
   translation) of the set. Precision and recall per flag and for any flag, over all items;
   the share flagged per set (on single sentences: the false alarms of splitting's usual case).
4) The retry (`checked.check_sentences`, as `tmt translate --no-split --report` runs it):
   flagged lines retried (cut at their sentence ends), cleared (each sentence's translation
   passes), and cased BLEU and chrF against --ref (joined the same way) before and after,
   per set; beside them BLEU had the retry been kept only when cleared, or only when the
   check passes its whole translation.
5) Cost: the --src sentences as `tmt translate` translates them (splitting on), in batches of
   --batch-size sentences of similar length, without and with the check
   (`checked.translate_checked`), on the torch threads the process has (pin it:
   `OMP_NUM_THREADS=1 taskset -c 0`).

`scripts/benchmark.py dropped` calls `add_arguments` and `run` from here.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
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
from transformer_mt.inference.checked import check_sentences, translate_checked  # noqa: E402
from transformer_mt.inference.dropped import FLAGS, check_translations  # noqa: E402
from transformer_mt.inference.line_settings import LineSettings  # noqa: E402
from transformer_mt.inference.paragraphs import joined, sentence_groups  # noqa: E402
from transformer_mt.inference.requests import Texts  # noqa: E402
from transformer_mt.inference.sentences import SplitLines  # noqa: E402
from transformer_mt.inference.translator import Translation, Translator  # noqa: E402
from transformer_mt.text_files import read_lines  # noqa: E402

DEFAULT_DATA = REPO / "data" / "multi30k"
LENGTH_SHARE = 0.7
WORD_SHARE = 0.5
WORD = re.compile(r"\w+")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--src", type=Path, default=DEFAULT_DATA / "test2016.de")
    parser.add_argument("--ref", type=Path, default=DEFAULT_DATA / "test2016.en")
    parser.add_argument("--joins", type=int, nargs="+", default=[2, 3, 4], metavar="N")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences a batch")
    parser.add_argument("--beam-size", type=int, help="default: the checkpoint's")


def in_batches(
    translate: Callable[[list[str]], list[Translation]], texts: Sequence[str], batch_size: int
) -> tuple[list[Translation], float]:
    """`translate` of `texts` in batches of `batch_size` texts of similar length (sorted by
    characters), results in input order, and the seconds it took."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    found: list[Translation | None] = [None] * len(texts)
    start = time.perf_counter()
    for first in range(0, len(order), batch_size):
        chunk = order[first : first + batch_size]
        for i, translation in zip(chunk, translate([texts[i] for i in chunk]), strict=True):
            found[i] = translation
    return found, time.perf_counter() - start


def word_share(sentence: str, words: Counter[str]) -> float:
    """The share of `sentence`'s words (lowercased, with their counts) found in `words`."""
    mine = Counter(w.lower() for w in WORD.findall(sentence))
    total = sum(mine.values())
    return sum(min(n, words[w]) for w, n in mine.items()) / total if total else 1.0


def dropped(output: str, singles: Sequence[str]) -> bool:
    """Whether the translation `output` of a joined line lost content its sentences'
    translations `singles` hold (see the module, 2)."""
    if len(output) < LENGTH_SHARE * len(" ".join(singles)):
        return True
    words = Counter(w.lower() for w in WORD.findall(output))
    return any(word_share(single, words) < WORD_SHARE for single in singles)


def precision_recall(predicted: Sequence[bool], labels: Sequence[bool]) -> dict:
    tp = sum(p and t for p, t in zip(predicted, labels, strict=True))
    fp = sum(p and not t for p, t in zip(predicted, labels, strict=True))
    fn = sum(t and not p for p, t in zip(predicted, labels, strict=True))
    return {
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "precision": round(tp / (tp + fp), 3) if tp + fp else None,
        "recall": round(tp / (tp + fn), 3) if tp + fn else None,
    }


def build_set(
    translator: Translator, sources: Sequence[str], references: Sequence[str], args
) -> list[dict]:
    """The items of the set (see the module, 1-2): per item its set name, source, reference,
    translation and label."""
    batch = args.batch_size
    singles, _ = in_batches(translator.translate, sources, batch)
    items = [
        {"set": "1", "source": s, "reference": r, "found": t, "dropped": False}
        for s, r, t in zip(sources, references, singles, strict=True)
    ]
    for n in args.joins:
        lines, refs = joined(sources, n), joined(references, n)
        found, _ = in_batches(translator.translate, lines, batch)
        for group, line, ref, translation in zip(
            sentence_groups(range(len(sources)), n), lines, refs, found, strict=True
        ):
            label = dropped(translation.texts[0], [singles[i].texts[0] for i in group])
            item = {"set": str(n), "source": line, "reference": ref, "found": translation}
            items.append({**item, "dropped": label})
        print(f"translated the lines of {n}", file=sys.stderr, flush=True)
    return items


def flag_rows(items: list[dict], flags: list[tuple[str, ...]]) -> list[dict]:
    """Precision and recall per flag and for any, and the share flagged per set."""
    labels = [item["dropped"] for item in items]
    rows = []
    for flag in (*FLAGS, "any"):
        predicted = [bool(f) if flag == "any" else flag in f for f in flags]
        rows.append({"bench": "dropped", "kind": "flag", "flag": flag})
        rows[-1] |= precision_recall(predicted, labels)
    for name in dict.fromkeys(item["set"] for item in items):
        mine = [i for i, item in enumerate(items) if item["set"] == name]
        row = {"bench": "dropped", "kind": "set", "set": name, "lines": len(mine)}
        row["dropped"] = sum(labels[i] for i in mine)
        row["flagged"] = sum(bool(flags[i]) for i in mine)
        found = precision_recall([bool(flags[i]) for i in mine], [labels[i] for i in mine])
        rows.append({**row, "recall": found["recall"]})
    return rows


def retry_rows(translator: Translator, items: list[dict]) -> list[dict]:
    """The retry of the flagged items (see the module, 4), per set: BLEU and chrF with the
    retry kept always (as `check_sentences` keeps it), and BLEU with it kept only when each
    of its sentences passes the check (`cleared`) or when its whole translation does."""
    found = [item["found"] for item in items]
    sources = [item["source"] for item in items]

    def retranslate(parts: SplitLines, owners: Sequence[int]) -> list[Translation]:
        request = Texts.of([sources[i] for i in owners])
        return translator.translate_sentences(request, parts, [translator.default] * len(owners))

    directions = [translator.default] * len(items)
    results = check_sentences(translator, sources, directions, found, retranslate)
    retried = [i for i, (_, report) in enumerate(results) if report and report.retried]
    outputs = [results[i][0].texts[0] for i in retried]
    whole = check_translations(
        translator, [sources[i] for i in retried], outputs, [translator.default] * len(retried)
    )
    passes = {i: not s.flags() for i, s in zip(retried, whole, strict=True)}
    kept = {
        "always": [t.texts[0] for t, _ in results],
        "cleared": [
            (t if r and r.cleared else f).texts[0] for (t, r), f in zip(results, found, strict=True)
        ],
        "whole": [
            (t if passes.get(i) else f).texts[0]
            for i, ((t, _), f) in enumerate(zip(results, found, strict=True))
        ],
    }
    rows = []
    for name in dict.fromkeys(item["set"] for item in items):
        mine = [i for i, item in enumerate(items) if item["set"] == name]
        reports = [results[i][1] for i in mine]
        refs = [items[i]["reference"] for i in mine]

        def scores(outputs: Sequence[str], mine=mine, refs=refs) -> list:
            return corpus_scores([outputs[i] for i in mine], refs, ["bleu", "chrf"])

        before = scores([t.texts[0] for t in found])
        after = {rule: scores(outputs) for rule, outputs in kept.items()}
        rows.append(
            {
                "bench": "dropped",
                "kind": "retry",
                "set": name,
                "flagged": sum(bool(r.flags) for r in reports),
                "retried": sum(r.retried for r in reports),
                "cleared": sum(bool(r.cleared) for r in reports),
                "bleu_before": round(before[0].score, 2),
                "bleu_after": round(after["always"][0].score, 2),
                "bleu_if_cleared": round(after["cleared"][0].score, 2),
                "bleu_if_whole_passes": round(after["whole"][0].score, 2),
                "chrf_before": round(before[1].score, 2),
                "chrf_after": round(after["always"][1].score, 2),
            }
        )
    return rows


def cost_rows(args, sources: Sequence[str]) -> list[dict]:
    """Sentences a second without and with the check (see the module, 5)."""
    changes = {"max_tokens": 10**9}  # batches of --batch-size sentences, not of a token budget
    if args.beam_size is not None:
        changes["beam_size"] = args.beam_size
    translator = Translator.from_checkpoint(str(args.checkpoint), **changes)
    in_batches(translator.translate, sources[: args.batch_size], args.batch_size)  # warm up

    def checked(texts: list[str]) -> list[Translation]:
        return [line.translation for line in translate_checked(translator, texts)]

    rows = []
    for check, translate in ((False, translator.translate), (True, checked)):
        _, seconds = in_batches(translate, sources, args.batch_size)
        rows.append(
            {
                "bench": "dropped",
                "kind": "cost",
                "check": check,
                "sentences": len(sources),
                "seconds": round(seconds, 1),
                "sentences_per_s": round(len(sources) / seconds, 1),
            }
        )
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def run(args: argparse.Namespace) -> list[dict]:
    """Rows: flags (precision, recall), sets, retries, cost; each with the settings."""
    sources, references = read_lines(args.src), read_lines(args.ref)
    changes = {"max_tokens": 10**9}
    if args.beam_size is not None:
        changes["beam_size"] = args.beam_size
    whole = Translator.from_checkpoint(
        str(args.checkpoint), **changes, lines=LineSettings(split_sentences=False)
    )
    items = build_set(whole, sources, references, args)
    outputs = [item["found"].texts[0] for item in items]
    scores = check_translations(
        whole, [item["source"] for item in items], outputs, [whole.default] * len(items)
    )
    flags = [s.flags() for s in scores]
    rows = flag_rows(items, flags) + retry_rows(whole, items) + cost_rows(args, sources)
    settings = {
        "checkpoint": str(args.checkpoint),
        "src": str(args.src),
        "beam_size": whole.decode.beam_size,
        "batch_size": args.batch_size,
        "items": len(items),
        **run_conditions(),
    }
    return [row | settings for row in rows]


def print_table(results: list[dict], file=sys.stdout) -> None:
    """Precision and recall per flag, the sets, the retry, the cost."""
    kinds = {kind: [r for r in results if r["kind"] == kind] for kind in ("flag", "set")}
    headers = ["flag", "flagged dropped", "flagged not dropped", "missed", "precision", "recall"]
    rows = [
        [r["flag"], r["tp"], r["fp"], r["fn"], r["precision"], r["recall"]] for r in kinds["flag"]
    ]
    print_markdown_table(headers, "lrrrrr", rows, file)
    print(file=file)
    headers = ["sentences a line", "lines", "dropped", "flagged", "recall"]
    rows = [[r["set"], r["lines"], r["dropped"], r["flagged"], r["recall"]] for r in kinds["set"]]
    print_markdown_table(headers, "rrrrr", rows, file)
    print(file=file)
    headers = ["sentences a line", "flagged", "retried", "cleared", "BLEU before", "after"]
    headers += ["kept if cleared", "kept if whole passes", "chrF before", "after"]
    rows = [
        [r["set"], r["flagged"], r["retried"], r["cleared"], r["bleu_before"], r["bleu_after"]]
        + [r["bleu_if_cleared"], r["bleu_if_whole_passes"], r["chrf_before"], r["chrf_after"]]
        for r in results
        if r["kind"] == "retry"
    ]
    print_markdown_table(headers, "r" * len(headers), rows, file)
    print(file=file)
    cost = [r for r in results if r["kind"] == "cost"]
    headers = ["check", "sentences", "seconds", "sentences/s"]
    rows = [
        ["yes" if r["check"] else "no", r["sentences"], r["seconds"], r["sentences_per_s"]]
        for r in cost
    ]
    print_markdown_table(headers, "lrrr", rows, file)
    last = results[-1]
    print(
        f"{last['checkpoint']}, {last['src']}, beam {last['beam_size']}, batches of "
        f"{last['batch_size']} sentences, {conditions_text(last)}; {last['items']} items checked",
        file=file,
    )


def main() -> None:
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
