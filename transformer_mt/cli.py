"""Command line: tmt {train,translate,evaluate,average,plot,import,export,distill,attention,serve}.

Handlers stay thin: parse, load, call the library. Errors a user can fix (`TmtError`) print one
line on stderr and exit with status 2; results go to stdout, logs and progress to stderr. This
is the only module that knows flag names: a library `SettingError` names the argument, and
`FLAGS` turns it into the flag that set it. SIGTERM and SIGHUP end a command as Ctrl-C does
(`interrupting_signals`): its outputs' temporaries are removed and the status is 128 + signal.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from transformer_mt import __version__
from transformer_mt.config import decode_field_types
from transformer_mt.documents import FORMATS
from transformer_mt.errors import MachineError, SettingError, TmtError, printable, shown_value
from transformer_mt.files import MACHINE_ERRNOS
from transformer_mt.progress import PROGRESS_SECONDS
from transformer_mt.shortlist.lexicon import ShortlistSettings

if TYPE_CHECKING:  # imported where used: `tmt --help` loads no model library
    from transformer_mt.inference.requests import Texts

# Library arguments set by a flag of the same meaning in every subcommand that has it.
FLAGS = {
    "alignment_layer": "--alignment-layer",
    "allowed_hosts": "--allowed-hosts",
    "api_keys": "--api-keys",
    "block_size": "--block-size",
    "cache_entries": "--cache-entries",
    "char_limit": "--char-limit",
    "chunk_lines": "--chunk-lines",
    "cors_origins": "--cors-origins",
    "device": "--device",
    "head": "--head",
    "host": "--host",
    "kv_blocks": "--kv-blocks",
    "layer": "--layer",
    "max_batch_tokens": "--max-batch-tokens",
    "max_client_connections": "--max-client-connections",
    "max_connections": "--max-connections",
    "max_length_ratio": "--max-length-ratio",
    "max_queue": "--max-queue",
    "max_source_chrf": "--max-source-chrf",
    "min_prob": "--min-prob",
    "per_source": "--per-source",
    "port": "--port",
    "quantize": "--quantize",
    "req_limit": "--req-limit",
    "shortlist": "--shortlist",
    "src": "--src",
    "src_lang": "--src-lang",
    "tgt_lang": "--tgt-lang",
}


# The decode settings `tmt translate` may change: DecodeConfig field -> (flag, help). Each
# flag takes the field's type (`decode_field_types`); unset, the checkpoint's value holds.
DECODE_FLAGS = {
    "beam_size": ("--beam-size", "1 = greedy (default: the checkpoint's)"),
    "max_tokens": ("--max-tokens", "source tokens per batch"),
    "n_best": ("--nbest", "print N 'i ||| text ||| score' lines per input (N <= beam)"),
    "length_penalty": ("--length-penalty", "GNMT alpha"),
}


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model from a YAML config")
    p.add_argument("--config", required=True, help="YAML experiment config")
    p.add_argument("--run-dir", help="output directory (default: runs/<config name>)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides")
    p.set_defaults(handler=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    from transformer_mt.training.run import run_training

    _check_run_dir(args)
    return run_training(args.config, args.run_dir, args.set)


def _check_run_dir(args: argparse.Namespace) -> None:
    """Refuse a run directory where training would write over a file it reads: a corpus,
    tokenizer text or parent checkpoint of the config named like a file the run writes
    (`run_layout.run_file`). The config itself may be the run's config.yaml: resuming with
    it rewrites it with the settings in use, as every resume does."""
    from transformer_mt.artifacts import config_input_files
    from transformer_mt.config import load_config
    from transformer_mt.run_layout import run_file

    cfg = load_config(args.config, args.set)
    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / Path(args.config).stem
    for path, what in config_input_files(cfg, f"--config {args.config}"):
        written = run_file(run_dir.resolve(), path.resolve())
        if written is not None:
            raise TmtError(
                f"{path}: the {what} is {written}, which training writes; move it, or train "
                "into another --run-dir"
            )


def _add_translate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate a file or stdin with a trained checkpoint")
    p.add_argument("--checkpoint", required=True, help="e.g. runs/X/checkpoints/best.pt")
    p.add_argument("--input", default="-", help="source text, one sentence a line (- = stdin)")
    p.add_argument("--output", default="-", help="where translations go (- = stdout)")
    p.add_argument(
        "--format",
        default="text",
        choices=["text", *FORMATS],
        help="text: a translation per line; html, markdown: the input is one document, its "
        "markup kept (docs/documents.md)",
    )
    kinds = decode_field_types(DECODE_FLAGS)
    for name, (flag, text) in DECODE_FLAGS.items():
        metavar = flag.removeprefix("--").replace("-", "_").upper()
        p.add_argument(flag, dest=name, type=kinds[name], metavar=metavar, help=text)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--quantize", choices=["int8"], help="dynamic int8 linear layers (CPU)")
    p.add_argument(
        "--shortlist",
        metavar="FILE",
        help="vocabulary map from `tmt shortlist`: each sentence scores only the target pieces "
        "listed for its source pieces (faster; docs/distillation.md)",
    )
    _add_language_flags(p)
    p.add_argument("--ref", help="reference file: print BLEU and chrF on stderr at the end")
    p.add_argument(
        "--prefix",
        help="file of target prefixes, one per input line (blank: none): each translation "
        "starts with its line's prefix",
    )
    p.add_argument(
        "--glossary",
        metavar="FILE",
        help="TSV file of 'source term<TAB>target term' lines (target = source: keep it "
        "untranslated): the translation of a sentence holding a source term holds its target",
    )
    p.add_argument(
        "--glossary-ignore-case",
        action="store_true",
        help="find the glossary's source terms whatever their case",
    )
    p.add_argument(
        "--constraints",
        metavar="FILE",
        help="file of target phrases, one line per input line, TAB-separated (blank: none): "
        "each translation holds its line's phrases",
    )
    p.add_argument("--progress", action="store_true", help="progress bar even when not a tty")
    p.add_argument(
        "--report",
        metavar="FILE",
        help="check each sentence for dropped content and write a JSON line per input line: "
        "flags, scores, whether retried and cleared; a flagged line of several sentences "
        "(--no-split) is translated again sentence by sentence (docs/checks.md)",
    )
    p.add_argument(
        "--no-split",
        dest="split_sentences",
        action="store_false",
        help="translate each line as one sentence (default: a line of several sentences is "
        "translated sentence by sentence and joined back)",
    )
    p.add_argument(
        "--alignments",
        action="store_true",
        help="append a TAB and src_idx-tgt_idx subword alignment pairs to each translation",
    )
    p.add_argument(
        "--alignment-layer",
        type=int,
        default=-1,
        help="decoder layer whose cross-attention aligns (default -1: the last); also places "
        "a document's inline markup",
    )
    p.set_defaults(handler=_run_translate)


def _add_language_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tgt-lang", help="language to translate into, for a multilingual model (e.g. fra)"
    )
    p.add_argument("--src-lang", help="language of the input, for a model that asks (NLLB)")


def _set_cpu_threads() -> None:
    """Torch threads for the idle cores (`machine.set_threads`), said on stderr when other
    work holds some: a thread sharing its core with a busy process stalls the others."""
    from transformer_mt.machine import set_threads

    threads, governor = set_threads(0)
    if governor is not None and threads.value < len(governor.cores):
        print(f"note: {threads.reason}", file=sys.stderr)


def _run_translate(args: argparse.Namespace) -> int:
    from transformer_mt.files import decode_lines, read_lines
    from transformer_mt.inference.constrained import ConstraintsError
    from transformer_mt.inference.glossary import Glossary, read_constraints
    from transformer_mt.inference.stream import translate_stream
    from transformer_mt.inference.translator import Translator
    from transformer_mt.machine import keep_freed_memory

    _check_translate_args(args)
    if args.format != "text":
        return _translate_document(args)
    keep_freed_memory()
    references = _read_references(args.ref)
    prefixes = None if args.prefix is None else read_lines(args.prefix)
    constraints = None if args.constraints is None else read_constraints(args.constraints)
    glossary = None
    if args.glossary is not None:
        glossary = Glossary.load(args.glossary, args.glossary_ignore_case)
    if args.device == "cpu":
        _set_cpu_threads()
    with contextlib.ExitStack() as stack:
        interactive = args.input == "-" and sys.stdin is not None and sys.stdin.isatty()
        name = "<stdin>" if args.input == "-" else args.input
        lines = decode_lines(_open_in(args.input, stack), name)
        options = None
        if not interactive or prefixes is not None or constraints is not None:
            lines = list(lines)  # whole file: length-sorted batches keep padding low
            _check_references(name, len(lines), args.ref, references)
            options = _line_options(args, name, lines, prefixes, constraints)
        translator = Translator.from_checkpoint(
            args.checkpoint,
            args.device,
            args.quantize,
            args.alignment_layer if args.alignments else None,
            args.src_lang,
            args.tgt_lang,
            args.split_sentences,
            args.shortlist,
            **_decode_changes(args),
        )
        out = _open_out(args.output, stack)
        report = None if args.report is None else _open_out(args.report, stack)
        bar = args.progress or (sys.stderr.isatty() and not interactive)
        # Without a terminal (a log file, a batch job): a plain progress line now and then.
        plain = None if interactive or sys.stderr.isatty() else PROGRESS_SECONDS
        total = None if interactive else len(lines)
        best: list[str] = []
        chunk = 1 if interactive else 2000
        try:
            count = translate_stream(
                translator,
                lines,
                out,
                chunk,
                options=options,
                glossary=glossary,
                progress=bar,
                total=total,
                collect=best,
                report_every_s=plain,
                report_out=report,
            )
        except ConstraintsError as err:
            raise TmtError(f"{name}:{err.line + 1}: {err.reason}") from None
    _print_input_warnings(translator)
    print(f"translated {count} line(s)", file=sys.stderr)
    if references is not None:
        from transformer_mt.evaluation import corpus_scores

        for score in corpus_scores(best, references, ["bleu", "chrf"]):
            print(score.string, file=sys.stderr)
    return 0


def _print_input_warnings(translator, unit: str = "line") -> None:
    """What the translator changed in the input (truncated lines or document blocks, language
    tags taken out), counted on stderr once the output is written."""
    if translator.truncated_lines:
        print(
            f"warning: {translator.truncated_lines} {unit}(s) longer than the model's "
            f"{translator.max_src_tokens} source tokens were truncated",
            file=sys.stderr,
        )
    if translator.tagged_lines:
        print(
            f"warning: {translator.tagged_lines} {unit}(s) held a language tag, taken out: the "
            "language comes from --tgt-lang / --src-lang only",
            file=sys.stderr,
        )


def _translate_document(args: argparse.Namespace) -> int:
    """`tmt translate --format html|markdown`: the whole input is one document."""
    from transformer_mt.documents.translate import translate_document
    from transformer_mt.documents.units import DocumentError
    from transformer_mt.files import decode_document
    from transformer_mt.inference.glossary import Glossary
    from transformer_mt.inference.requests import Texts
    from transformer_mt.inference.translator import Translator

    line_flags = {"--ref": args.ref, "--prefix": args.prefix, "--alignments": args.alignments}
    line_flags["--report"] = args.report
    line_flags["--constraints"] = args.constraints  # a document's terms: --glossary
    line_flags["--nbest"] = args.n_best not in (None, 1)
    for flag, given in line_flags.items():
        if given:
            raise TmtError(f"{flag}: for --format text only (a document is not one per line)")
    if args.device == "cpu":
        _set_cpu_threads()
    name = "<stdin>" if args.input == "-" else args.input
    with contextlib.ExitStack() as stack:
        text = decode_document(_open_in(args.input, stack).read(), name)
        translator = Translator.from_checkpoint(
            args.checkpoint,
            args.device,
            args.quantize,
            None,  # documents align by themselves (documents/alignment.py)
            args.src_lang,
            args.tgt_lang,
            shortlist=args.shortlist,
            **_decode_changes(args),
        )
        glossary = None
        if args.glossary is not None:
            glossary = Glossary.load(args.glossary, args.glossary_ignore_case)
        document = Texts.of([text], glossary=glossary)
        try:
            translated = translate_document(
                translator, document, args.format, alignment_layer=args.alignment_layer
            )
        except DocumentError as err:
            raise TmtError(f"{name}:{err.line}:{err.column}: {err.reason}") from None
        _open_out(args.output, stack).write(translated)
    _print_input_warnings(translator, "block")
    print(f"translated {name} ({args.format})", file=sys.stderr)
    return 0


def _check_translate_args(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output (or report) that would overwrite an input,
    non-numbers, alignments of an n-best list, and a report of lines it cannot retry."""
    from transformer_mt.artifacts import checkpoint_input_files
    from transformer_mt.files import check_output

    if args.alignments and args.n_best is not None and args.n_best > 1:
        raise TmtError(
            f"--nbest {args.n_best}: --alignments aligns the 1-best translation: drop --nbest"
        )
    if args.report is not None and args.format == "text":
        for flag, given in (
            ("--prefix", args.prefix),
            ("--constraints", args.constraints),
            ("--alignments", args.alignments),
        ):
            if given:
                raise TmtError(
                    f"--report: retries flagged lines cut at their sentence ends, which "
                    f"cannot keep {flag}; drop one of them"
                )

    inputs = [
        *checkpoint_input_files(args.checkpoint, "--checkpoint"),
        (args.ref, "--ref file"),
        (args.prefix, "--prefix file"),
        (args.glossary, "--glossary file"),
        (args.constraints, "--constraints file"),
        (args.shortlist, "--shortlist file"),
        (None if args.input == "-" else args.input, "--input file"),
    ]
    if args.output != "-":
        check_output(args.output, inputs)
    if args.report == "-":
        raise TmtError("--report -: give a file name (stdout carries the translations)")
    if args.report is not None:
        written = [(None if args.output == "-" else args.output, "--output file")]
        check_output(args.report, [*inputs, *written])
    if args.length_penalty is not None and not math.isfinite(args.length_penalty):
        raise TmtError(
            f"--length-penalty {args.length_penalty}: must be a finite number (e.g. 0.6 or 1.0)"
        )


def _line_options(
    args: argparse.Namespace,
    input_name: str,
    lines: list[str],
    prefixes: list[str] | None,
    constraints: list[list[str]] | None,
) -> Texts | None:
    """The per-line options of `lines` from their files (None: none given); a file without
    one line per input line is refused, naming both files (`TextsCountError.field`)."""
    from transformer_mt.inference.requests import Texts, TextsCountError

    if prefixes is None and constraints is None:
        return None
    try:
        return Texts.of(lines, prefixes=prefixes, constraints=constraints)
    except TextsCountError as err:
        path, what, one = {
            "prefixes": (args.prefix, "prefix", "one prefix line"),
            "constraints": (args.constraints, "constraint", "one line of phrases"),
        }[err.field]
        raise TmtError(
            f"{path}: {err.given} {what} line(s) for the {err.n_texts} line(s) of "
            f"{input_name}: give {one} (blank for none) per input line"
        ) from None


def _decode_changes(args: argparse.Namespace) -> dict[str, object]:
    """The decode settings given on the command line (`DECODE_FLAGS`); the rest come from the
    checkpoint.

    `--nbest` never changes the beam: a larger n-best than the beam is refused by the decode
    config's check, naming both values.
    """
    given = {name: getattr(args, name) for name in DECODE_FLAGS}
    return {name: value for name, value in given.items() if value is not None}


def _read_references(path: str | None) -> list[str] | None:
    if path is None:
        return None
    from transformer_mt.evaluation import read_segments

    return read_segments(path)


def _check_references(
    input_name: str, input_lines: int, ref_path: str | None, references: list[str] | None
) -> None:
    if references is not None:
        from transformer_mt.evaluation import check_line_counts

        check_line_counts(input_name, input_lines, ref_path, len(references))


def _open_in(path: str, stack: contextlib.ExitStack) -> BinaryIO:
    if path == "-":
        if sys.stdin is None:  # started with descriptor 0 closed (`<&-`)
            raise TmtError("<stdin>: is closed; pipe text in or give --input FILE")
        return stack.enter_context(open(sys.stdin.fileno(), "rb", closefd=False))
    try:
        return stack.enter_context(open(path, "rb"))
    except OSError as err:
        raise TmtError(f"{path}: {err.strerror}") from None


def _open_out(path: str, stack: contextlib.ExitStack) -> TextIO:
    """stdout, or a temporary file renamed to `path` only when the `stack` closes cleanly."""
    if path == "-":
        if sys.stdout is None:  # started with descriptor 1 closed (`>&-`)
            raise TmtError("<stdout>: is closed; redirect it or give --output FILE")
        return stack.enter_context(open(sys.stdout.fileno(), "w", encoding="utf-8", closefd=False))
    from transformer_mt.files import atomic_open

    return stack.enter_context(atomic_open(path))


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="score a translation file against a reference file, or a checkpoint's test set in "
        "each of its directions",
    )
    p.add_argument("--hyp", help="detokenised translations, one per line")
    p.add_argument("--ref", help="detokenised references, one per line")
    p.add_argument(
        "--metrics", nargs="+", default=["bleu", "chrf"], choices=["bleu", "chrf", "ter"]
    )
    p.add_argument("--lowercase", action="store_true", help="case-insensitive scores")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of lines")
    p.add_argument(
        "--checkpoint", help="instead of --hyp/--ref: translate the test set and score it"
    )
    p.add_argument("--test", help="with --checkpoint: the test split (default: its data.test)")
    p.add_argument(
        "--directions",
        nargs="+",
        metavar="SRC-TGT",
        help="with --checkpoint: e.g. de-en fr-de (default: every direction of the model)",
    )
    p.add_argument(
        "--pivot", metavar="LANG", help="also score zero-shot directions through LANG (e.g. en)"
    )
    p.add_argument(
        "--no-off-target",
        action="store_true",
        help="skip identifying the language of each output (needs the langid extra)",
    )
    p.add_argument("--beam-size", type=int, help="override the checkpoint's decode.beam_size")
    p.set_defaults(handler=_run_evaluate)


def _run_evaluate(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    if args.checkpoint is not None:
        return _evaluate_directions(args)
    if args.hyp is None or args.ref is None:
        raise TmtError("evaluate: give --hyp and --ref, or --checkpoint")

    from transformer_mt.evaluation import evaluate_files

    scores = evaluate_files(args.hyp, args.ref, args.metrics, args.lowercase)
    if args.json:
        print(json.dumps([dataclasses.asdict(s) for s in scores], indent=1))
    else:
        for score in scores:
            print(score.string)
    return 0


def _evaluate_directions(args: argparse.Namespace) -> int:
    """`tmt evaluate --checkpoint`: one table of BLEU, chrF and off-target rate by direction."""
    import dataclasses
    import json

    from transformer_mt.inference.direction_scores import directions_table, score_directions

    if args.hyp is not None or args.ref is not None:
        raise TmtError("evaluate: give --hyp and --ref, or --checkpoint, not both")
    directions = None
    if args.directions is not None:
        directions = [_direction(text) for text in args.directions]
    decode = {} if args.beam_size is None else {"beam_size": args.beam_size}
    off_target = not args.no_off_target
    scores = score_directions(
        args.checkpoint, args.test, directions, args.pivot, off_target, **decode
    )
    if args.json:
        print(json.dumps([dataclasses.asdict(s) for s in scores], indent=1))
    else:
        print(directions_table(scores))
    return 0


def _direction(text: str) -> tuple[str, str]:
    """`de-en` as ("de", "en"); a one-line error for anything else."""
    src, sep, tgt = text.partition("-")
    if not sep or not src or not tgt or "-" in tgt:
        raise TmtError(f"--directions {shown_value(repr(text))}: expected SRC-TGT, e.g. de-en")
    return src, tgt


def _add_average(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("average", help="average the weights of the last N periodic checkpoints")
    p.add_argument("inputs", nargs="+", help="run directories, checkpoint directories or .pt files")
    p.add_argument("--last", type=int, help="average only the newest N (1 or more) checkpoints")
    p.add_argument("--out", required=True, help="the averaged checkpoint to write")
    p.set_defaults(handler=_run_average)


def _run_average(args: argparse.Namespace) -> int:
    from transformer_mt.artifacts import (
        average_checkpoints,
        resolve_average_inputs,
        save_checkpoint,
    )

    paths = resolve_average_inputs(args.inputs, args.last, args.out)
    if args.last is not None and len(paths) < args.last:
        print(
            f"warning: averaging {len(paths)} checkpoints: only {len(paths)} of the {args.last} "
            "asked for exist",
            file=sys.stderr,
        )
    save_checkpoint(average_checkpoints(paths), args.out)
    print(f"averaged {len(paths)} checkpoints into {args.out}", file=sys.stderr)
    return 0


def _add_plot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="draw a run's learning curves to a PNG")
    p.add_argument("run_dir", help="run directory holding metrics.jsonl")
    p.add_argument("--out", help="PNG path (default: RUN_DIR/curves.png)")
    p.set_defaults(handler=_run_plot)


def _run_plot(args: argparse.Namespace) -> int:
    from transformer_mt.training.plot import plot_run

    print(plot_run(args.run_dir, args.out))
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a Hugging Face (Marian, M2M100) or CTranslate2 model")
    p.add_argument("checkpoint", help="e.g. runs/X/checkpoints/best.pt")
    p.add_argument(
        "out_dir",
        help="directory to write (created; replaces an earlier export, never other files)",
    )
    p.add_argument("--format", required=True, choices=["hf", "ctranslate2"])
    p.add_argument("--quantize", choices=["int8", "int8_float32", "int16"], help="ctranslate2 only")
    p.add_argument(
        "--shortlist",
        metavar="FILE",
        help="ctranslate2 only: include this vocabulary map (`tmt shortlist`) as vmap.txt, "
        "used by translate_batch(..., use_vmap=True)",
    )
    p.set_defaults(handler=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from transformer_mt.inference.export import export

    out = export(args.checkpoint, args.out_dir, args.format, args.quantize, args.shortlist)
    print(f"wrote {args.format} model to {out}", file=sys.stderr)
    return 0


def _add_distill(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "distill",
        help="translate a config's training corpus with a teacher checkpoint into a corpus "
        "for a student (resumable: run it again to go on)",
    )
    p.add_argument(
        "--checkpoint", required=True, help="the teacher, e.g. runs/X/checkpoints/best.pt"
    )
    p.add_argument("--config", required=True, help="YAML whose data.train is translated")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides")
    p.add_argument(
        "--run-dir",
        required=True,
        help="manifest, chunks of translations and log; the same command resumes there",
    )
    p.add_argument("--out", help="corpus prefix written: OUT.SRC, OUT.TGT (default RUN_DIR/train)")
    p.add_argument(
        "--chunk-lines",
        type=int,
        help="lines translated and written together (default 2000); a kill loses one chunk",
    )
    kinds = decode_field_types(DECODE_FLAGS)
    for name, (flag, text) in DECODE_FLAGS.items():
        if name != "n_best":  # the corpus holds the best translation
            metavar = flag.removeprefix("--").replace("-", "_").upper()
            p.add_argument(flag, dest=name, type=kinds[name], metavar=metavar, help=text)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--quantize", choices=["int8"], help="dynamic int8 linear layers (CPU)")
    p.add_argument(
        "--no-filter",
        dest="filter",
        action="store_false",
        help="keep every pair (default: drop empty translations, copies and length outliers)",
    )
    p.add_argument("--max-length-ratio", type=float, help="longer/shorter side in characters")
    p.add_argument("--max-source-chrf", type=float, help="chrF against the source of a copy")
    p.set_defaults(handler=_run_distill)


def _run_distill(args: argparse.Namespace) -> int:
    from transformer_mt.config import load_config
    from transformer_mt.distill.filtering import FilterRules
    from transformer_mt.distill.job import TeacherSettings, distill, output_paths

    cfg = load_config(args.config, args.set)
    limits = {"max_length_ratio": args.max_length_ratio, "max_source_chrf": args.max_source_chrf}
    rules = FilterRules(**{name: value for name, value in limits.items() if value is not None})
    if not args.filter and any(value is not None for value in limits.values()):
        raise TmtError("--no-filter: keeps every pair; drop --max-length-ratio/--max-source-chrf")
    decode = {name: getattr(args, name) for name in DECODE_FLAGS if name != "n_best"}
    chunk = {} if args.chunk_lines is None else {"chunk_lines": args.chunk_lines}
    settings = TeacherSettings(
        device=args.device,
        quantize=args.quantize,
        decode={name: value for name, value in decode.items() if value is not None},
        **chunk,
    )
    _check_config_file(list(output_paths(cfg.data, args.run_dir, args.out)), args.config)
    if args.device == "cpu":
        _set_cpu_threads()
    distill(
        args.checkpoint, cfg.data, args.run_dir, args.out, settings, rules if args.filter else None
    )
    return 0


def _add_shortlist(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "shortlist",
        help="learn which target pieces each source piece may produce (IBM Model 1 on a "
        "corpus), for faster translation with --shortlist",
    )
    p.add_argument("--checkpoint", required=True, help="the model the shortlist is for")
    p.add_argument("--out", required=True, help="vocabulary map file to write (CTranslate2's)")
    p.add_argument(
        "--config", help="YAML whose data.train is learnt from (default: the checkpoint's)"
    )
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides")
    defaults = ShortlistSettings()
    p.add_argument(
        "--per-source",
        type=int,
        default=defaults.per_source,
        help=f"target pieces listed per source piece (default {defaults.per_source})",
    )
    p.add_argument(
        "--min-prob",
        type=float,
        default=defaults.min_prob,
        help=f"a listed piece's least p(target | source) (default {defaults.min_prob:g})",
    )
    p.add_argument(
        "--frequent",
        type=int,
        default=defaults.frequent,
        help=f"most frequent target pieces, allowed everywhere (default {defaults.frequent})",
    )
    p.set_defaults(handler=_run_shortlist)


def _run_shortlist(args: argparse.Namespace) -> int:
    from transformer_mt.config import load_config
    from transformer_mt.shortlist.build import build_shortlist

    data = None
    if args.config is not None:
        _check_config_file([args.out], args.config)
        data = load_config(args.config, args.set).data
    elif args.set:
        raise TmtError("--set: overrides --config; give --config too")
    settings = ShortlistSettings(args.per_source, args.frequent, args.min_prob)
    report = build_shortlist(args.checkpoint, args.out, data, settings)
    print(f"shortlist: {report}; wrote {args.out}", file=sys.stderr)
    return 0


def _check_config_file(outputs: list[str | Path], config: str) -> None:
    """Refuse an output over the `--config` file, which the library never sees; it checks
    the corpus the config names and the checkpoint (`files.check_output`)."""
    from transformer_mt.files import check_output

    for out in outputs:
        check_output(out, [(config, "--config file")])


def _add_import(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import", help="make a checkpoint of a public model (OPUS-MT, NLLB / M2M100)"
    )
    p.add_argument("source", help="a Hugging Face model directory, or a hub name when online")
    p.add_argument("--out", required=True, help="checkpoint file to write, e.g. opus-de-en.pt")
    p.set_defaults(handler=_run_import)


def _run_import(args: argparse.Namespace) -> int:
    from transformer_mt.importing.convert import import_model

    imported = import_model(args.source, args.out)
    cfg = imported.converted.cfg
    print(
        f"wrote {args.out}: {imported.src_lang}->{imported.tgt_lang}, "
        f"{cfg.n_layers}+{cfg.decoder_layers} layers, d_model {cfg.d_model}",
        file=sys.stderr,
    )
    return 0


def _add_attention(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("attention", help="draw attention heatmaps of one sentence pair to a PNG")
    p.add_argument("--checkpoint", required=True, help="e.g. runs/X/checkpoints/best.pt")
    p.add_argument("--src", required=True, help="source sentence")
    p.add_argument("--tgt", help="target sentence (default: the greedy translation)")
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--layer", type=int, help="only this layer (default: all)")
    p.add_argument("--head", type=int, help="only this head (default: all)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    _add_language_flags(p)
    p.set_defaults(handler=_run_attention)


def _run_attention(args: argparse.Namespace) -> int:
    from transformer_mt.artifacts import checkpoint_input_files
    from transformer_mt.files import check_output
    from transformer_mt.inference.attention_maps import draw_attention

    check_output(args.out, checkpoint_input_files(args.checkpoint))
    out = draw_attention(
        args.checkpoint, args.src, args.out, args.tgt, args.layer, args.head, args.device,
        args.src_lang, args.tgt_lang,
    )  # fmt: skip
    print(out)
    return 0


def _add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="translate over HTTP: JSON API, streaming, metrics and a web page"
    )
    p.add_argument("--checkpoint", required=True, help="e.g. runs/X/checkpoints/best.pt")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: all)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--quantize", choices=["int8"], help="dynamic int8 linear layers (CPU)")
    p.add_argument(
        "--shortlist",
        metavar="FILE",
        help="vocabulary map from `tmt shortlist`: each sentence scores only its listed "
        "target pieces, as with tmt translate --shortlist",
    )
    _add_language_flags(p)
    # The engine's limits; each defaults to the engine's own value.
    p.add_argument("--max-batch-tokens", type=int, help="tokens decoded together in one step")
    p.add_argument("--max-queue", type=int, help="sentences waiting for admission before 429")
    p.add_argument("--kv-blocks", type=int, help="blocks of the paged decoding cache")
    p.add_argument("--block-size", type=int, help="tokens per cache block")
    p.add_argument(
        "--cache-entries", type=int, help="entries of each cache (translation, encoder, prefix)"
    )
    # Who may connect, and how many; each defaults to HttpSettings' value.
    p.add_argument(
        "--allowed-hosts",
        nargs="+",
        default=[],
        metavar="NAME",
        help="Host names answered besides the listening address (*: any)",
    )
    p.add_argument(
        "--cors-origins",
        nargs="+",
        default=[],
        metavar="ORIGIN",
        help="origins whose web pages may call the API, e.g. https://app.example (*: any)",
    )
    p.add_argument("--max-connections", type=int, help="connections open at once")
    p.add_argument(
        "--max-client-connections", type=int, help="connections open at once from one address"
    )
    # API keys and limits (serve/quotas.py), for /v1 and the LibreTranslate endpoints alike.
    p.add_argument(
        "--api-keys",
        metavar="FILE",
        help="require a key of FILE ('KEY REQUESTS/MIN CHARACTERS/MIN' lines, - for no limit); "
        "read again when it changes or on SIGHUP",
    )
    p.add_argument(
        "--req-limit",
        type=int,
        metavar="N",
        help="requests per minute from one client address (a request of n texts counts n)",
    )
    p.add_argument("--char-limit", type=int, metavar="N", help="characters per text")
    # The server drains on SIGINT / SIGTERM and reads its keys again on SIGHUP (serve/server.py).
    p.set_defaults(handler=_run_serve, own_signals=True)


def _run_serve(args: argparse.Namespace) -> int:
    from transformer_mt.serve import missing_dependencies

    if missing_dependencies():
        raise TmtError("tmt serve needs the serve extra: pip install 'transformer_mt[serve]'")
    from transformer_mt.machine import keep_freed_memory
    from transformer_mt.serve.engine import Engine, ServeLimits
    from transformer_mt.serve.http_settings import HttpSettings
    from transformer_mt.serve.server import serve

    http = HttpSettings(
        max_connections=args.max_connections,
        max_client_connections=args.max_client_connections,
        allowed_hosts=tuple(args.allowed_hosts),
        cors_origins=tuple(args.cors_origins),
        api_keys=args.api_keys,
        req_limit=args.req_limit,
        char_limit=args.char_limit,
    )
    keep_freed_memory()
    if args.device == "cpu":
        _set_cpu_threads()
    given = {
        "max_batch_tokens": args.max_batch_tokens,
        "max_queue": args.max_queue,
        "kv_blocks": args.kv_blocks,
        "block_size": args.block_size,
        "cache_entries": args.cache_entries,
    }
    limits = ServeLimits(**{name: value for name, value in given.items() if value is not None})
    engine = Engine.from_checkpoint(
        args.checkpoint,
        args.device,
        args.quantize,
        limits,
        args.src_lang,
        args.tgt_lang,
        args.shortlist,
    )
    print(engine.describe(), file=sys.stderr)
    serve(engine, args.host, args.port, settings=http)
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors quote a value at most `MESSAGE_CHARS` long (argparse
    quotes a bad value whole: `invalid int value: '999...'`); subcommands' parsers too."""

    def error(self, message: str):  # type: ignore[override]
        super().error(_one_line(message))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tmt", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"transformer_mt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_train,
        _add_translate,
        _add_evaluate,
        _add_average,
        _add_plot,
        _add_import,
        _add_export,
        _add_distill,
        _add_shortlist,
        _add_attention,
        _add_serve,
    ):
        add(sub)
    return parser


def flag_message(err: TmtError) -> str:
    """The message of `err`, naming the flag instead of the library argument it set."""
    flag = FLAGS.get(err.setting) if isinstance(err, SettingError) else None
    if flag is None:
        return str(err)
    if err.value is None:
        return f"{flag}: {err.reason}"
    return f"{flag} {shown_value(err.value)}: {err.reason}"


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status: 0 done, 2 the user's mistake (one line says which),
    1 the machine's (a full disk, too little memory, a reader gone), 128 + the signal's number
    when interrupted (130 SIGINT, 143 SIGTERM, 129 SIGHUP)."""
    args = build_parser().parse_args(argv)
    try:
        with interrupting_signals(not getattr(args, "own_signals", False)):
            return args.handler(args)
    except MachineError as err:
        return _fail(str(err), 1)
    except TmtError as err:
        return _fail(flag_message(err), 2)
    except KeyboardInterrupt as err:
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        with contextlib.suppress(OSError, ValueError, AttributeError):
            print(f"interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        # The reader of stdout left (`tmt translate ... | head -1`): later writes, and Python's
        # own flush at exit, would fail again.
        _silence_stdout()
        return _fail("stdout was closed by its reader (broken pipe); output stopped", 1)
    except OSError as err:
        if err.errno not in MACHINE_ERRNOS:
            raise
        return _fail(f"{err.filename or 'a file'}: {err.strerror}", 1)
    except (MemoryError, RuntimeError) as err:
        from transformer_mt.machine import out_of_memory_message

        message = out_of_memory_message(err)
        if message is None:
            raise
        return _fail(message, 1)


def _fail(message: str, status: int) -> int:
    with contextlib.suppress(OSError, ValueError, AttributeError):  # stderr may be closed too
        print(f"error: {_one_line(message)}", file=sys.stderr)
    return status


MESSAGE_CHARS = 1000  # of an error line: the longest file names (4,096 bytes) are cut


def _one_line(message: str) -> str:
    """`message` on one line whatever a user's value in it holds (a file name with a newline
    would otherwise start a line of its own, an `error:` line even), its middle cut when
    longer than `MESSAGE_CHARS`, so that the reason at its end stays. Values a message quotes
    are cut where they are quoted (`errors.shown_value`); this is the net under the rest."""
    if len(message) > MESSAGE_CHARS:
        half = MESSAGE_CHARS // 2
        message = f"{message[:half]}...{message[-half:]}"
    return printable(message, len(message))


# Signals that end a command as Ctrl-C does (SIGHUP: the terminal closed; not on Windows).
INTERRUPTING_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, as SIGINT raises KeyboardInterrupt: the
    `finally` blocks on the way out remove outputs' temporaries (`files.atomic_path`)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def interrupting_signals(enabled: bool = True) -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP raise `Interrupted` in the main thread.

    Without this, they kill the process on the spot and a command writing an output leaves its
    temporary behind, where Ctrl-C removes it. Left alone: a signal ignored when the command
    started (`nohup` ignores SIGHUP), or one some code set a handler for already. A second
    signal acts as it did before (it kills), so a stuck cleanup can still be stopped; a forked
    child (a data-loading worker) that inherited the handler dies by the signal as before.
    Training sets its own handlers around its loop (training/signals.py), which save first.
    """
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)
        if os.getpid() != owner:
            os.kill(os.getpid(), signum)
            return
        raise Interrupted(signum)

    previous = {}
    for signum in INTERRUPTING_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:
            previous[signum] = signal.signal(signum, interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _silence_stdout() -> None:
    import os

    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
