"""A model's test scores in each of its directions: BLEU, chrF and the off-target rate, one
table (`tmt evaluate --checkpoint`, `scripts/run_experiment.py` for a multilingual config).

    supervised   a direction the checkpoint was trained on (`Languages.trained`)
    zero-shot    any other direction it can be told (`Languages.zero_shot`)
    pivot        a zero-shot direction src -> tgt as src -> pivot -> tgt, the same model twice,
                 where it was trained on both legs

Off-target output is the known failure of zero-shot translation: text in another language
than the one asked for, most often the pivot's (Arivazhagan et al., 2019; Zhang et al., 2020).
Its rate is the share of outputs whose language, identified among the model's languages
(`langid.LanguageIdentifier`), is not the target; an output it cannot place counts as off
target.

Example:
    scores = score_directions("model.pt", "data/multi30k/test2016", pivot="en")
    print(directions_table(scores))
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from transformer_mt.artifacts import stored_origin
from transformer_mt.config import DataConfig
from transformer_mt.data.dataset import column_texts, load_split
from transformer_mt.data.locations import source_faults
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.evaluation import bleu_tokenize, check_tokenize, corpus_scores
from transformer_mt.inference.languages import Languages, Pair, in_direction
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator
from transformer_mt.input_files import as_read
from transformer_mt.langid import LanguageIdentifier
from transformer_mt.progress import Counted, ProgressReport, Reports, silent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DirectionScore:
    """The test scores of one direction by one route."""

    src_lang: str
    tgt_lang: str
    route: str  # "supervised", "zero-shot" or "pivot <code>"
    bleu: float
    chrf: float
    off_target: float | None  # share of outputs not in tgt_lang (None: not measured)
    sentences: int
    tokenize: str  # BLEU's tokenizer for tgt_lang (`evaluation.bleu_tokenize`)


def score_directions(
    checkpoint: str,
    test: str | None = None,
    directions: Sequence[tuple[str, str]] | None = None,
    pivot: str | None = None,
    off_target: bool = True,
    progress: Reports | None = None,
    device: str = "cpu",
    **decode_changes: object,
) -> list[DirectionScore]:
    """Translate the test set of every direction asked and score it.

    Args:
        checkpoint: the model.
        test: the test split as the checkpoint's `data.format` names it (a path prefix of
            `{test}.{lang}` files for text); None: the checkpoint's `data.test`.
        directions: (source, target) codes; None: every direction of the model, the
            supervised ones first.
        pivot: also score each zero-shot direction through this language.
        off_target: measure the off-target rate (needs lingua, the `langid` extra).
        progress: makes the report of each direction's translation, given what it counts
            and its total of sentences (a route through a pivot counts both legs); None:
            silent.
        device: where the model runs (`Translator.from_checkpoint`).
        decode_changes: search settings over the checkpoint's (beam_size, ...).

    Raises:
        TmtError: a direction the model does not translate, naming it and the language.
        SettingError: a pivot the model does not know; no `test` where the checkpoint sets
            none; a `test` whose files are missing, empty or not regular files.
        DataError: a test file of the checkpoint's data.test is missing, or one is unequal.
        LinguaMissing: off_target without lingua installed.
    """

    def load(direction: Pair) -> Translator:
        lines = LineSettings(src_lang=direction[0], tgt_lang=direction[1])
        return Translator.from_checkpoint(checkpoint, device=device, lines=lines, **decode_changes)

    translator = in_direction(load, directions[0] if directions else None, checkpoint)
    languages = translator.languages
    asked = list(directions if directions is not None else languages.directions)
    _check_asked(languages, asked, pivot)
    # Where and how its test set is read: its config, read again without its weights (the
    # model's whole load had been repeated for it), and the directory its run read it from.
    origin = stored_origin(Path(checkpoint))
    if origin is None:  # loaded above, then damaged or replaced
        raise TmtError(f"{checkpoint}: not a readable checkpoint any more")
    data = origin.config.data
    data = dataclasses.replace(data, test=test or _stored_test(data, origin.workdir))
    identifier = LanguageIdentifier(languages.codes) if off_target else None
    pivoted = _pivoted(asked, languages, pivot)
    tests = [dataclasses.replace(data, src_lang=s, tgt_lang=t) for s, t in asked]
    for test_data in tests:  # a FIFO or a folder refused before any translation
        if faults := source_faults(test_data, ("test",)):
            if test is not None:
                raise SettingError("test", test, ", ".join(faults[0][2]))
            raise SettingError(
                "test", None, f"the checkpoint's test set: {', '.join(faults[0][2])}; give one"
            )
    scores = []
    for (src_lang, tgt_lang), test_data in zip(asked, tests, strict=True):
        split = load_split(test_data, "test")
        sources, references = column_texts(split, "src"), column_texts(split, "tgt")
        supervised = (src_lang, tgt_lang) in languages.trained
        routes = [("supervised" if supervised else "zero-shot", [tgt_lang])]
        if (src_lang, tgt_lang) in pivoted:
            routes.append((f"pivot {pivot}", [pivot, tgt_lang]))
        for route, targets in routes:
            counted = Counted("translated", "lines", "lines", f"{src_lang}->{tgt_lang} {route}")
            report = (progress or silent)(counted, len(sources) * len(targets))
            with contextlib.closing(report):
                texts = _translated(translator, src_lang, targets, sources, report)
            scores.append(_scored(src_lang, tgt_lang, route, texts, references, identifier))
            log.info("%s", _row(scores[-1]))
    return scores


def _stored_test(data: DataConfig, workdir: str | None) -> str:
    """The test set of a checkpoint's config (`data.test`), as its run read it in `workdir`
    (`input_files.as_read`).

    Raises:
        SettingError: the config sets none.
    """
    if data.test is None:
        raise SettingError("test", None, "the checkpoint's config sets no data.test; give one")
    return as_read(data, workdir, ("test",)).test or data.test


def _check_asked(languages: Languages, asked: list[Pair], pivot: str | None) -> None:
    """Refuse, before any translation, a direction the model may not be asked for, a target
    language whose BLEU tokenizer is not installed (MeCab), and a pivot it does not know.

    Raises:
        TmtError: naming the direction; SettingError: naming the tokenizer or the pivot.
    """
    for src_lang, tgt_lang in asked:
        try:
            languages.check(src_lang, tgt_lang)
        except SettingError as err:
            raise TmtError(
                f"direction {src_lang}-{tgt_lang}: {err.setting} {err.value}: {err.reason}"
            ) from None
    for tokenize in sorted({bleu_tokenize(tgt_lang) for _, tgt_lang in asked}):
        check_tokenize(tokenize)
    if pivot is not None and pivot not in languages.codes:
        known = ", ".join(languages.codes)
        raise SettingError("pivot", pivot, f"the model has no such language; it knows {known}")


def _translated(
    translator: Translator,
    src_lang: str,
    targets: list[str],
    sources: list[str],
    report: ProgressReport,
) -> list[str]:
    """`sources` (in `src_lang`) translated into each of `targets` in turn (one: a direction;
    two: through a pivot), the best translation of each line, `report` told of each batch."""
    texts, language = sources, src_lang
    for target in targets:
        pairs = [(language, target)] * len(texts)
        found = translator.translate(Texts.of(texts, directions=pairs), report.update)
        texts, language = [t.texts[0] for t in found], target
    return texts


def _pivoted(asked: list[Pair], languages: Languages, pivot: str | None) -> list[Pair]:
    """The directions of `asked` scored through `pivot` too: zero-shot ones whose two legs
    through it are trained (a warning where none is)."""
    if pivot is None:
        return []
    pivoted = [
        pair
        for pair in asked
        if pair not in languages.trained
        and all(leg in languages.trained for leg in ((pair[0], pivot), (pivot, pair[1])))
    ]
    if not pivoted:
        log.warning(
            "pivot %s: no direction asked is zero-shot with both legs through %s trained; "
            "nothing is pivoted",
            pivot,
            pivot,
        )
    return pivoted


def _scored(
    src_lang: str,
    tgt_lang: str,
    route: str,
    hypotheses: list[str],
    references: list[str],
    identifier: LanguageIdentifier | None,
) -> DirectionScore:
    tokenize = bleu_tokenize(tgt_lang)
    bleu, chrf = corpus_scores(hypotheses, references, ["bleu", "chrf"], tokenize=tokenize)
    off_target = None
    if identifier is not None:
        # Of the outputs with letters to identify: `2024`, kept as written, is in no language.
        found = [d for d in identifier.detect(hypotheses) if d.code is not None]
        off_target = sum(d.code != tgt_lang for d in found) / max(len(found), 1)
    return DirectionScore(
        src_lang, tgt_lang, route, bleu.score, chrf.score, off_target, len(hypotheses), tokenize
    )


HEADER = "| direction | route | BLEU | chrF | off-target |\n|---|---|---:|---:|---:|"


def _row(score: DirectionScore) -> str:
    off = "-" if score.off_target is None else f"{100 * score.off_target:.1f}%"
    return (
        f"| {score.src_lang}->{score.tgt_lang} | {score.route} | {score.bleu:.2f} | "
        f"{score.chrf:.2f} | {off} |"
    )


def directions_table(scores: Sequence[DirectionScore]) -> str:
    """The scores as a Markdown table, one row per direction and route."""
    return "\n".join([HEADER, *map(_row, scores)])
