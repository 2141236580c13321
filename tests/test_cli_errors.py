"""Library errors describe the value and the reason; only the cli package names flags."""

import argparse
import ast
import re
from pathlib import Path

import pytest

from transformer_mt.cli import FLAGS, build_parser, flag_message
from transformer_mt.errors import SettingError, TmtError

PACKAGE = Path(__file__).resolve().parents[1] / "transformer_mt"
FLAG = re.compile(r"(^|[\s(])--[a-z]")


def test_a_setting_error_names_the_argument_and_the_cli_names_the_flag():
    err = SettingError("quantize", "int4", "choose one of int8")
    assert str(err) == "quantize=int4: choose one of int8"
    assert flag_message(err) == "--quantize int4: choose one of int8"
    empty = SettingError("src", None, "the source sentence is empty")
    assert (str(empty), flag_message(empty)) == (
        "src: the source sentence is empty",
        "--src: the source sentence is empty",
    )
    unmapped = SettingError("n_best", 2, "alignments are of the best translation")
    assert (
        flag_message(unmapped)
        == str(unmapped)
        == "n_best=2: alignments are of the best translation"
    )
    assert flag_message(TmtError("plain")) == "plain"
    assert set(FLAGS.values()) <= _defined_flags()


def _defined_flags() -> set[str]:
    """Every flag of every subcommand of `tmt`."""
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {flag for p in sub.choices.values() for a in p._actions for flag in a.option_strings}


def _raised_texts(tree: ast.AST):
    """The string pieces of every `raise X(...)` argument in a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            for arg in node.exc.args:
                for piece in ast.walk(arg):
                    if isinstance(piece, ast.Constant) and isinstance(piece.value, str):
                        yield node.lineno, piece.value


@pytest.mark.parametrize(
    "module",
    sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "cli"),
    ids=str,
)
def test_library_error_messages_name_no_flag(module):
    tree = ast.parse(module.read_text(encoding="utf-8"))
    flagged = [(line, text) for line, text in _raised_texts(tree) if FLAG.search(text)]
    assert not flagged, f"{module.relative_to(PACKAGE.parent)}: {flagged}"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["evaluate", "--hyp", "h", "--ref", "r", "--metirc", "bleu"],
            "error: unrecognized arguments: --metirc; did you mean --metrics? "
            "(see tmt evaluate --help)",
        ),
        (  # a required flag mistyped: argparse had said only that --config is missing
            ["train", "--confg", "c.yaml"],
            "error: unrecognized arguments: --confg; did you mean --config? (see tmt train --help)",
        ),
        (
            ["average", "run", "--last", "2", "--out", "a.pt", "zzz"],
            "error: unrecognized arguments: zzz (see tmt average --help)",
        ),
        (
            ["translat", "--input", "x"],
            "error: argument command: invalid choice: 'translat' (choose from 'data', 'train', "
            "'translate', 'evaluate', 'score', 'average', 'plot', 'import', 'export', 'info', "
            "'distill', 'shortlist', 'attention', 'serve'); did you mean translate? "
            "(see tmt --help)",
        ),
    ],
)
def test_an_unknown_argument_is_refused_by_its_commands_parser(capsys, argv, expected):
    """`tmt --help` lists no command's flags: the command's help is the one to read."""
    from transformer_mt.cli import main

    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == [expected]


def test_a_command_started_with_stderr_closed_still_writes_its_output(checkpoint, tmp_path):
    """A process started with `2>&-` (cron, daemons) has no sys.stderr: the first progress
    check had ended the command, status 1, nothing written and nothing said."""
    import subprocess
    import sys

    source = tmp_path / "in.de"
    source.write_text("ein hund\nzwei katzen\n", encoding="utf-8")
    out = tmp_path / "out.en"
    command = [sys.executable, "-m", "transformer_mt", "translate", "--checkpoint",
               str(checkpoint), "--input", str(source), "--output", str(out)]  # fmt: skip
    done = subprocess.run(command, stderr=subprocess.DEVNULL, pass_fds=(), close_fds=True,
                          preexec_fn=lambda: __import__("os").close(2))  # fmt: skip
    assert done.returncode == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2


def test_a_value_that_starts_with_two_dashes_is_a_value():
    """The check for unknown flags had read a sentence given to --src as a flag."""
    from transformer_mt.cli import parse

    argv = ["attention", "--checkpoint", "a.pt", "--out", "x.png", "--src", "-- Hi there"]
    assert parse(argv).src == "-- Hi there"


def test_an_abbreviation_of_one_flags_two_names_is_that_flag():
    """`--ou` starts both names of translate's --output/--out: one flag, not an ambiguity
    (Python 3.11's argparse had refused it as ambiguous)."""
    from transformer_mt.cli import parse

    assert parse(["translate", "--checkpoint", "a.pt", "--ou", "x.txt"]).output == "x.txt"


def test_an_abbreviation_of_two_flags_is_still_ambiguous(capsys):
    from transformer_mt.cli import parse

    with pytest.raises(SystemExit):
        parse(["translate", "--checkpoint", "a.pt", "--s", "1"])
    assert "ambiguous option: --s could match" in capsys.readouterr().err


def test_a_finished_command_ignores_the_signals_that_end_one(checkpoint, monkeypatch, capsys):
    """Python's shutdown after the command takes seconds with torch loaded: a SIGTERM there had
    killed a command that had finished its work, its exit status lost."""
    import signal
    import sys

    from transformer_mt.cli import main

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setattr(sys, "argv", ["tmt", "info", str(checkpoint)])
    try:
        assert main(["info", str(checkpoint)]) == 0  # called with its arguments: a library call
        assert {s: signal.getsignal(s) for s in handlers} == handlers
        assert main() == 0  # the process's own command
        assert {signal.getsignal(s) for s in handlers} == {signal.SIG_IGN}
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    capsys.readouterr()
