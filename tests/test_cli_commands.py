"""What `tmt` says about itself and about the small mistakes of a first run."""

import argparse

import pytest

from transformer_mt.cli import build_parser, main


def test_help_names_every_command(capsys):
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert "shortlist" in sub.choices
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    described = shown.split("positional arguments")[0]
    for command in sub.choices:
        assert command in described, command
