"""Command line: `tmt COMMAND`, the commands of `COMMANDS`.

Each command is a module of this package (translate.py, train.py, serve.py, ...) that adds
its subparser and a handler: parse, load, call the library; common.py holds what they share.
Errors a user can fix (`TmtError`) print one line on stderr and exit with status 2; results go
to stdout, logs and progress to stderr. Only this package knows flag names: a library
`SettingError` names the argument, and `FLAGS` turns it into the flag that set it. SIGTERM
and SIGHUP end a command as Ctrl-C does (signals.py): its outputs' temporaries are removed
and the status is 128 + signal.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import logging
import os
import re
import signal
import sys

from transformer_mt import __version__
from transformer_mt.cli import (
    attention,
    checkpoints,
    data,
    distill,
    evaluate,
    score,
    serve,
    train,
    translate,
)
from transformer_mt.cli.common import Parser, run_command
from transformer_mt.cli.flags import DECODE_FLAGS, flag_name
from transformer_mt.cli.signals import INTERRUPTING_SIGNALS
from transformer_mt.config.errors import ConfigError
from transformer_mt.errors import SettingError, TmtError, shown_value

# The subcommands, in the order `tmt --help` lists them.
COMMANDS = (
    data.add_data,
    train.add_train,
    translate.add_translate,
    evaluate.add_evaluate,
    score.add_score,
    checkpoints.add_average,
    train.add_plot,
    checkpoints.add_import,
    checkpoints.add_export,
    checkpoints.add_info,
    distill.add_distill,
    distill.add_shortlist,
    attention.add_attention,
    serve.add_serve,
)

# Library arguments each set by the flag spelled like it, with the same meaning in every
# subcommand that has it: a SettingError naming one is shown as the flag's.
SAME_NAME = (
    "alignment_layer",
    "checkpoint",
    "chunk_lines",
    "device",
    "frequent",
    "head",
    "host",
    "layer",
    "max_length_ratio",
    "max_source_chrf",
    "min_prob",
    "out",
    "per_source",
    "pivot",
    "port",
    "quantize",
    "sampling",
    "shortlist",
    "src",
    "src_lang",
    "test",
    "tgt",
    "tgt_lang",
)
FLAGS = {name: flag_name(name) for name in (*SAME_NAME, *serve.ENGINE_LIMITS, *serve.HTTP_LIMITS)}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tmt")
    parser.add_argument("--version", action="version", version=f"transformer_mt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    for command in sub.choices.values():  # whose flags a mistyped one is told apart from
        command.set_defaults(command_parser=command)
    # From the commands added, so that a new one is listed without anyone writing it here.
    parser.description = f"Command line: tmt COMMAND, one of {', '.join(sub.choices)}."
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, a flag the command lacks refused by the command's own parser: `see
    tmt evaluate --help`, not `tmt --help` (which lists no flag), with the flag of its that
    the mistyped one is closest to, before argparse would say only that a required flag is
    missing (`tmt train --confg x.yaml`)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    at = next((i for i, arg in enumerate(argv) if arg in sub.choices), None)
    if at is None and argv and not argv[0].startswith("-"):
        close = difflib.get_close_matches(argv[0], list(sub.choices), n=1)
        if close:  # `tmt translat`: the command meant, as a mistyped flag is told
            choices = ", ".join(repr(name) for name in sub.choices)
            parser.error(
                f"argument command: invalid choice: {shown_value(argv[0])!r} (choose from "
                f"{choices}); did you mean {close[0]}?"
            )
    if at is not None:
        command = sub.choices[argv[at]]
        flags = [flag for action in command._actions for flag in action.option_strings]
        for arg in itertools.takewhile(lambda a: a != "--", argv[at + 1 :]):
            name = arg.split("=", 1)[0]  # with a space it is a value, as argparse reads it
            if (
                name.startswith("--")
                and " " not in arg
                and not any(f.startswith(name) for f in flags)
            ):
                _unknown(command, [arg], flags)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _unknown(args.command_parser, unknown, [])
    return args


def _unknown(command: argparse.ArgumentParser, unknown: list[str], flags: list[str]) -> None:
    """Refuse `unknown` arguments by `command`'s parser, naming the closest of its flags."""
    flags = flags or [flag for action in command._actions for flag in action.option_strings]
    typed = [arg.split("=", 1)[0] for arg in unknown if arg.startswith("--")]
    close = difflib.get_close_matches(typed[0], flags, n=1) if typed else []
    message = f"unrecognized arguments: {' '.join(unknown)}"
    command.error(message + (f"; did you mean {close[0]}?" if close else ""))


def flag_message(err: TmtError, args: argparse.Namespace | None = None) -> str:
    """The message of `err`, naming the flag instead of the library argument it set, or
    instead of the decode key a flag of `args` set (`--beam-size 0`, not `decode.beam_size=0`).
    """
    if isinstance(err, ConfigError) and args is not None:
        return _decode_flag_message(err, args) or str(err)
    flag = FLAGS.get(err.setting) if isinstance(err, SettingError) else None
    if flag is None:
        return str(err)
    if err.value is None:
        return f"{flag}: {err.reason}"
    return f"{flag} {shown_value(err.value)}: {err.reason}"


def _decode_flag_message(err: ConfigError, args: argparse.Namespace) -> str | None:
    """`decode.beam_size=0 must be > 0` as `--beam-size 0: must be > 0` when the command line
    set beam_size; a rule between several keys with those the command line set named by
    their flags (`_decode_flags_named`); None for a message about another key, or about keys
    the config or the checkpoint set."""
    if len(err.keys) > 1:
        return _decode_flags_named(err, args)
    if not err.keys or not err.keys[0].startswith("decode."):
        return None
    field = err.keys[0].removeprefix("decode.")
    if field not in DECODE_FLAGS or getattr(args, field, None) is None:
        return None
    value, _, reason = str(err).removeprefix(f"{err.keys[0]}=").partition(" ")
    if not str(err).startswith(f"{err.keys[0]}=") or not reason:
        return None
    flag = DECODE_FLAGS[field].flag or flag_name(field)
    if isinstance(getattr(args, field), bool):  # a switch: --replace-unk, --no-replace-unk
        return f"{flag if getattr(args, field) else flag.replace('--', '--no-', 1)}: {reason}"
    return f"{flag} {value}: {reason}"


def _decode_flags_named(err: ConfigError, args: argparse.Namespace) -> str | None:
    """A rule between decode keys (`decode.n_best=6 must be <= decode.beam_size=5`) with
    each key the command line set named by its flag (`--nbest 6 must be <= --beam-size 5`);
    None when the command line set none of them."""
    given = {
        key: DECODE_FLAGS[field].flag or flag_name(field)
        for key in err.keys
        if (field := key.removeprefix("decode.")) in DECODE_FLAGS
        and key.startswith("decode.")
        and getattr(args, field, None) is not None
    }
    if not given:
        return None
    pattern = "|".join(re.escape(key) for key in given)
    return re.sub(rf"({pattern})=(\S+)", lambda m: f"{given[m[1]]} {m[2]}", str(err))


def _stderr_or_nothing() -> None:
    """Where the process was started with stderr closed (`2>&-`, some daemons and crontabs),
    its messages go nowhere, rather than the first of them ending the command."""
    try:
        os.fstat(2)
        usable = sys.stderr is not None
    except OSError:
        usable = False
    if not usable:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's, until it ends)


class _Prefixed(logging.Formatter):
    """`warning: ...`, as the commands' own warnings and notes are printed."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (`common.run_command`): 0 done, 2 the user's mistake,
    1 the machine's, 128 + the signal's number when interrupted."""
    # The library's warnings, where a command sets up no logging of its own (train and serve
    # do), reach stderr through logging's last resort, which writes the bare message.
    if logging.lastResort is not None:
        logging.lastResort.setFormatter(_Prefixed())
    _stderr_or_nothing()
    args = parse(argv)
    own_signals = getattr(args, "own_signals", False)
    status = run_command(
        lambda: args.handler(args),
        own_signals=own_signals,
        describe=lambda err: flag_message(err, args),
    )
    if argv is None:  # this process is the command, and the command is done
        _keep_status()
    return status


def _keep_status() -> None:
    """Ignore the signals that end a command from here on: what is left of the process is
    Python's shutdown (2-3 s with torch loaded), and a SIGTERM there had killed a command that
    had finished and written its output, its status lost (a wrapper that retries on 143 did
    the work again)."""
    for signum in (signal.SIGINT, *INTERRUPTING_SIGNALS):
        signal.signal(signum, signal.SIG_IGN)
