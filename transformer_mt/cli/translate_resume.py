"""`tmt translate` of a file into a file, continued where an interrupted run stopped: the
output is written in chunks beside its final name (`inference.resume`), with a fingerprint of
what decides the translations, so that the same command run again takes up the lines already
done and another one starts afresh."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING

from transformer_mt.stream_names import is_stream

if TYPE_CHECKING:  # imported where used: `tmt --help` loads no model library
    from transformer_mt.inference.resume import PartialOutput

# Flags that change what is said on stderr or where the output goes, not the translations:
# a run continued with another of them writes the same output.
NOT_IN_FINGERPRINT = frozenset({"output", "progress", "quiet"})


def open_partial(
    args: argparse.Namespace,
    is_file: bool,
    total: int | None,
    n_best: int,
    stack: contextlib.ExitStack,
) -> PartialOutput | None:
    """The resumable output of a file translated to a file (None: another run; `is_file`: the
    input is a regular file, of `total` lines), `n_best` lines for each line of the input,
    saying on stderr what became of an earlier run's partial. Not with --ref, whose scores
    need the translations of every chunk (an earlier run's are not scored again), nor
    --report, a second output."""
    stream = args.output == "-" or is_stream(args.output)  # a device, a FIFO, /dev/stdout
    if stream or not is_file or args.ref or args.report:
        return None
    from transformer_mt.inference.resume import resumable_output

    partial = stack.enter_context(resumable_output(args.output, _fingerprint(args), n_best))
    if args.quiet:
        return partial
    if partial.note is not None:
        print(f"note: {partial.note}", file=sys.stderr)
    if partial.resumed:
        print(
            f"note: continuing {partial.partial}: {partial.resumed} of {total} lines "
            "were translated by an earlier run",
            file=sys.stderr,
        )
    return partial


def _fingerprint(args: argparse.Namespace) -> dict[str, object]:
    """What decides the translations of a run: the identity (path, size, modification time)
    of each file it reads, and every flag but those in NOT_IN_FINGERPRINT."""
    from transformer_mt.inference.resume import file_identity

    checkpoints = args.checkpoint if isinstance(args.checkpoint, list) else [args.checkpoint]
    files = {
        "--checkpoint file": [file_identity(path) for path in checkpoints],
        **{
            f"{flag} file": file_identity(path)
            for flag, path in (
                ("--input", args.input),
                ("--prefix", args.prefix),
                ("--constraints", args.constraints),
                ("--glossary", args.glossary),
                ("--shortlist", args.shortlist),
            )
            if path is not None
        },
    }
    simple = (str, int, float, bool, type(None), list, tuple)
    flags = {
        f"--{key.replace('_', '-')}": value
        for key, value in sorted(vars(args).items())
        if key not in NOT_IN_FINGERPRINT and isinstance(value, simple)
    }
    return {**files, **flags}


def say_kept(partial: PartialOutput) -> None:
    """Where the lines an interrupted run finished wait for the same command to continue."""
    print(
        f"note: {partial.lines_done} translated line(s) kept in {partial.partial}; "
        "the same command continues from there",
        file=sys.stderr,
    )
