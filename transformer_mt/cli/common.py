"""What the commands share: a command's exit status and its one-line `error:` message, the
input and output streams, torch's thread count, and the flags several commands take alike."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TextIO

from transformer_mt.cli.signals import Interrupted, interrupting_signals
from transformer_mt.errors import MachineError, TmtError, printable
from transformer_mt.files import MACHINE_ERRNOS

MESSAGE_CHARS = 1000  # of an error line: the longest file names (4,096 bytes) are cut


def run_command(
    command: Callable[[], int], *, own_signals: bool, describe: Callable[[TmtError], str]
) -> int:
    """Run `command`; its exit status: 0 done, 2 the user's mistake (one line says which, in
    the words of `describe`), 1 the machine's (a full disk, too little memory, a reader gone),
    128 + the signal's number when interrupted (130 SIGINT, 143 SIGTERM, 129 SIGHUP). A
    command with `own_signals` handles SIGTERM and SIGHUP itself."""
    try:
        with interrupting_signals(not own_signals):
            return command()
    except MachineError as err:
        return fail(str(err), 1)
    except TmtError as err:
        return fail(describe(err), 2)
    except KeyboardInterrupt as err:
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        with contextlib.suppress(OSError, ValueError, AttributeError):
            print(f"interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        # The reader of stdout left (`tmt translate ... | head -1`): later writes, and Python's
        # own flush at exit, would fail again.
        _silence_stdout()
        return fail("stdout was closed by its reader (broken pipe); output stopped", 1)
    except OSError as err:
        if err.errno in MACHINE_ERRNOS:
            return fail(f"{err.filename or 'a file'}: {err.strerror}", 1)
        if err.filename is None:
            raise
        # A path the user gave that the system refuses (a name over 255 bytes, a file where a
        # folder should be): the commands check what they can foresee, this says the rest.
        return fail(f"{err.filename}: {err.strerror}", 2)
    except (MemoryError, RuntimeError) as err:
        from transformer_mt.machine import out_of_memory_message

        if isinstance(err, MemoryError):  # free what the failed work held, to say so
            traceback.clear_frames(err.__traceback__)
        try:
            message = out_of_memory_message(err)
        except MemoryError:
            message = "out of memory: the work asked for more memory than is available"
        if message is None:
            raise
        return fail(message, 1)


def fail(message: str, status: int) -> int:
    """Print `message` as one `error:` line on stderr; return `status`."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # stderr may be closed too
        print(f"error: {one_line(message)}", file=sys.stderr)
    return status


def one_line(message: str) -> str:
    """`message` on one line whatever a user's value in it holds (a file name with a newline
    would otherwise start a line of its own, an `error:` line even), its middle cut when
    longer than `MESSAGE_CHARS`, so that the reason at its end stays. Values a message quotes
    are cut where they are quoted (`errors.shown_value`); this is the net under the rest."""
    if len(message) > MESSAGE_CHARS:
        half = MESSAGE_CHARS // 2
        message = f"{message[:half]}...{message[-half:]}"
    return printable(message, len(message))


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line, as every other error of the command
    (argparse prints its usage block first), quoting a value at most `MESSAGE_CHARS` long
    (argparse quotes a bad value whole: `invalid int value: '999...'`), and whose flags of
    several values add up when given more than once (`Store`, its default action, in its
    groups and subcommands' parsers too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, Store)  # argument groups share the parser's registry

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"error: {one_line(message)} (see {self.prog} --help)\n")

    def _get_option_tuples(self, option_string: str) -> list[tuple[Any, ...]]:
        """argparse's matches of an abbreviated flag, one per flag: Python 3.11 counts each
        name of a flag as a match of its own, so that `--ou` was "ambiguous" between
        `--output` and `--out`, two names of one flag."""
        matches: dict[argparse.Action, tuple[Any, ...]] = {}
        for match in super()._get_option_tuples(option_string):  # type: ignore[misc]
            matches.setdefault(match[0], match)
        return list(matches.values())


class Store(argparse.Action):
    """argparse's default action, storing a flag's value, except that a flag of several
    values (nargs "+" or "*") given more than once adds each time's values: `--set a=1 --set
    b=2` sets both, `--checkpoint A --checkpoint B` is an ensemble of two. argparse's own
    `store` would keep the last time's values and drop the others without a word. The flag's
    default is replaced, not added to; a positional's values are stored as argparse does."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if not (self.option_strings and self.nargs in ("+", "*")):
            setattr(namespace, self.dest, values)
            return
        current = getattr(namespace, self.dest, None)
        if current is None or current is self.default:
            current = []
        setattr(namespace, self.dest, [*current, *values])


def _silence_stdout() -> None:
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def open_in(path: str, stack: contextlib.ExitStack) -> BinaryIO:
    """stdin (`-`) or the file `path` (a `.gz` decompressed), in bytes, closed with the
    `stack`."""
    from transformer_mt.text_files import open_binary

    if path == "-":
        if sys.stdin is None:  # started with descriptor 0 closed (`<&-`)
            raise TmtError("<stdin>: is closed; pipe text in or give --input FILE")
        return stack.enter_context(open(sys.stdin.fileno(), "rb", closefd=False))
    try:
        return stack.enter_context(open_binary(path))
    except OSError as err:
        raise TmtError(f"{path}: {err.strerror}") from None


def open_out(path: str, stack: contextlib.ExitStack, flag: str | None = "--output") -> TextIO:
    """stdout, or a temporary file renamed to `path` only when the `stack` closes cleanly;
    `flag`: the command's flag for a file instead of stdout (None: it has none)."""
    if path == "-":
        if sys.stdout is None:  # started with descriptor 1 closed (`>&-`)
            instead = "" if flag is None else f" or give {flag} FILE"
            raise TmtError(f"<stdout>: is closed; redirect it{instead}")
        stack.enter_context(_named_stdout())  # entered first, so it sees the close's errors too
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, io.UnsupportedOperation):
            return sys.stdout  # a stream put in place of the process's (an embedding program's)
        return stack.enter_context(open(fd, "w", encoding="utf-8", closefd=False))
    from transformer_mt.files import atomic_open

    return stack.enter_context(atomic_open(path))


@contextlib.contextmanager
def _named_stdout() -> Iterator[None]:
    """Name stdout in a machine's write error (a full disk) that a write to it raised: the
    OSError of a write to an open stream carries no file name."""
    try:
        yield
    except OSError as err:
        if err.filename is not None or err.errno not in MACHINE_ERRNOS:
            raise
        raise OSError(err.errno, err.strerror, "<stdout>") from None


def require_text(flag: str, value: str | None) -> None:
    """Refuse a command-line value that is not UTF-8 text: the system hands such bytes to
    Python as lone surrogates, which no tokenizer takes.

    Raises:
        TmtError: naming the flag.
    """
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise TmtError(f"{flag}: not valid UTF-8 text; give the text in UTF-8") from None


def set_cpu_threads(quiet: bool = False) -> None:
    """Torch threads for the idle cores (`machine.set_threads`), said on stderr (unless
    `quiet`) when other work holds some: a thread sharing its core with a busy process stalls
    the others."""
    from transformer_mt.machine import set_threads

    threads, governor = set_threads(0)
    if not quiet and governor is not None and threads.value < len(governor.cores):
        print(f"note: {threads.reason}", file=sys.stderr)


def add_device_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="where the model runs; auto (the default): a CUDA device where torch sees one "
        "(but the CPU with --quantize), else the CPU",
    )


def add_device_flags(p: argparse.ArgumentParser) -> None:
    add_device_flag(p)
    p.add_argument(
        "--quantize",
        choices=["int8", "bf16"],
        help="CPU: int8 (dynamic int8 linear layers) or bf16 (bfloat16 linear layers, on CPUs "
        "that compute bfloat16 natively: AMX or avx512_bf16)",
    )


def device_of(args: argparse.Namespace) -> str:
    """`--device` with auto resolved (`machine.resolve_device`; the CPU where --quantize, a
    CPU setting, is given), kept in `args` so that every later use agrees; resolved only
    when asked, so that a command refused before its work does not wait for torch.

    Raises:
        SettingError: cuda asked for where torch sees no CUDA device.
    """
    if args.device == "auto" and getattr(args, "quantize", None) is not None:
        args.device = "cpu"
    if args.device in ("auto", "cuda"):
        from transformer_mt.machine import resolve_device

        args.device = resolve_device(args.device).type
    return args.device


def add_language_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tgt-lang", help="language to translate into, for a multilingual model (e.g. fra)"
    )
    p.add_argument("--src-lang", help="language of the input, for a model that asks (NLLB)")
