"""A flag of several values given more than once keeps every value (argparse alone keeps the
last time's and drops the rest without a word): overrides, ensemble members, metrics, hosts."""

import argparse

import pytest

from transformer_mt.cli import build_parser
from transformer_mt.cli.common import Parser, Store


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def test_every_flag_of_several_values_adds_up():
    many = [
        (command, action.option_strings[0])
        for command, sub in _subparsers(build_parser())
        for action in sub._actions
        if action.option_strings and action.nargs in ("+", "*")
    ]
    assert len(many) >= 8  # --set (3), --checkpoint, --metrics, --directions, serve's lists
    for command, sub in _subparsers(build_parser()):
        for action in sub._actions:
            if action.option_strings and action.nargs in ("+", "*"):
                assert isinstance(action, Store), (command, action.option_strings)


@pytest.mark.parametrize(
    "argv, dest, expected",
    [
        (["train", "--config", "x", "--set", "a=1", "--set", "b=2", "c=3"], "set",
         ["a=1", "b=2", "c=3"]),
        (["train", "--config", "x"], "set", []),
        (["distill", "--checkpoint", "t", "--config", "x", "--run-dir", "r", "--set", "a=1",
          "--set", "b=2"], "set", ["a=1", "b=2"]),
        (["translate", "--checkpoint", "a.pt", "--checkpoint", "b.pt"], "checkpoint",
         ["a.pt", "b.pt"]),
        (["evaluate", "--hyp", "h", "--ref", "r", "--metrics", "bleu", "--metrics", "ter"],
         "metrics", ["bleu", "ter"]),
        (["evaluate", "--hyp", "h", "--ref", "r"], "metrics", None),
        (["serve", "--checkpoint", "a.pt", "--cors-origins", "http://a", "--cors-origins",
          "http://b"], "cors_origins", ["http://a", "http://b"]),
    ],
)  # fmt: skip
def test_a_repeated_flag_keeps_every_value(argv, dest, expected):
    assert getattr(build_parser().parse_args(argv), dest) == expected


def test_the_default_is_replaced_not_added_to():
    parser = Parser()
    parser.add_argument("--x", nargs="+", default=["d"])
    parser.add_argument("positional", nargs="*")  # a positional's values are argparse's
    assert parser.parse_args([]).x == ["d"]
    assert parser.parse_args(["--x", "a", "--x", "b"]).x == ["a", "b"]
    assert parser.parse_args(["p", "q"]).positional == ["p", "q"]
    assert parser.parse_args(["p", "--x", "a", "q"]).positional == ["p"]  # argparse's own rule


def test_flags_of_a_group_add_up_too():
    parser = Parser()
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--runs", nargs="+")
    group.add_argument("--other")
    parser.add_argument_group("more").add_argument("--more", nargs="*", default=[])
    argv = ["--runs", "a", "--runs", "b", "--more", "c", "--more", "d"]
    found = parser.parse_args(argv)
    assert (found.runs, found.more) == (["a", "b"], ["c", "d"])
    assert parser.parse_args(["--other", "1", "--other", "2"]).other == "2"
