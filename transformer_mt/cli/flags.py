"""Flags generated from the dataclass fields they set, so that a field's name is written once.

A command names the fields it offers in a table of `FieldFlag`s keyed by field name (the
help text, and the rare flag or metavar spelled otherwise); `add_field_flags` makes each flag
`--field-name`, storing to the field's name, typed by the field's type hint (a `Literal`'s
values are its choices; a `bool` is `--field-name` / `--no-field-name`), with no default: an
unset flag leaves the dataclass's own default (or the checkpoint's value) in force.
`given_fields` reads back those that were set, ready for the dataclass. The decode flags of
`tmt translate` and `tmt distill` (`DECODE_FLAGS`) are DecodeConfig's fields, every one of
them (a test walks the dataclass).
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from transformer_mt.config import decode_field_types


def flag_name(name: str) -> str:
    """The flag of library argument or dataclass field `name`: beam_size -> --beam-size."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class FieldFlag:
    """How one dataclass field shows on the command line."""

    help: str
    flag: str | None = None  # None: flag_name(field)
    metavar: str | None = None  # None: the flag in capitals (--beam-size: BEAM_SIZE)


# The decode settings `tmt translate` may change: every DecodeConfig field, in its order
# (search/__init__.py has the formulas); unset, the checkpoint's value holds.
DECODE_FLAGS = {
    "beam_size": FieldFlag("1 = greedy (default: the checkpoint's)"),
    "length_penalty": FieldFlag("the exponent alpha of --length-norm gnmt and power"),
    "length_norm": FieldFlag(
        "how a hypothesis' log-probability is divided by its length n: gnmt ((5 + n) / 6) ** "
        "alpha, average (n), power (n ** alpha, transformers' length_penalty), none"
    ),
    "early_stopping": FieldFlag(
        "when a beam search ends a sentence: k_finished (once K hypotheses have finished), "
        "heuristic (and no live one, scored at its length, beats the K-th; transformers' "
        "early_stopping=False), never (scored at its length or max_len)"
    ),
    "max_len_a": FieldFlag("output length <= max_len_a * source length + max_len_b"),
    "max_len_b": FieldFlag("see --max-len-a"),
    "min_len": FieldFlag("tokens before end-of-sentence may be chosen"),
    "no_repeat_ngram_size": FieldFlag(
        "no translation holds the same N tokens twice (0: off)", metavar="N"
    ),
    "disable_unk": FieldFlag(
        "never produce the unknown piece (shown as ⁇); --no-disable-unk allows it"
    ),
    "replace_unk": FieldFlag(
        "write each unknown piece as the source's unknown piece it attends to most (a number, "
        "name or character the vocabulary lacks); --no-replace-unk leaves ⁇"
    ),
    "n_best": FieldFlag(
        "print N 'i ||| text ||| score' lines per input (N <= beam; sampling: N samples)",
        flag="--nbest",
    ),
    "max_tokens": FieldFlag("source tokens per batch"),
    "sampling": FieldFlag(
        "draw each token from the model's distribution (filtered by --top-k, --top-p, "
        "--temperature) instead of searching; --no-sampling searches"
    ),
    "top_k": FieldFlag("sampling: draw among the K most probable tokens (0: all)"),
    "top_p": FieldFlag("sampling: draw among the most probable tokens holding P of the mass"),
    "temperature": FieldFlag("sampling: divide the log-probabilities by T (< 1: sharper)"),
    "seed": FieldFlag(
        "sampling: the seed of the draws (the same seed, input and flags: the same samples)"
    ),
}


def late_field_type(owner: Callable[[], type], name: str) -> Callable[[str], object]:
    """The argparse `type` of field `name` of a dataclass that building the parser must not
    import (its module imports torch, and `tmt --help` loads no model library): `owner`
    returns the dataclass when a value of the flag is converted, by the field's type."""

    def convert(text: str) -> object:
        kind, _ = value_type(typing.get_type_hints(owner())[name])
        try:
            return kind(text)
        except (TypeError, ValueError):  # worded as argparse words its own types' refusals
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None

    return convert


def value_type(hint: Any) -> tuple[Callable[[str], object], str | None]:
    """What one value of a field's flag converts with, and argparse's `nargs`, from the
    field's type hint: `int | None` -> (int, None), `tuple[str, ...]` -> (str, "+")."""
    origin = typing.get_origin(hint)
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if origin is tuple:
        return args[0], "+"
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return value_type(args[0])
    return hint, None


def add_field_flags(
    p: argparse.ArgumentParser, flags: Mapping[str, FieldFlag], hints: Mapping[str, Any]
) -> None:
    """A flag per field of `flags`, in their order, typed by the field's hint in `hints` (or
    by a `late_field_type`)."""
    for name, shown in flags.items():
        flag = shown.flag or flag_name(name)
        kind, nargs = value_type(hints[name])
        if kind is bool:
            p.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, help=shown.help)
            continue
        choices = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else None
        if choices:  # a Literal of strings: the flag's value is one of them
            kind = type(choices[0])
        metavar = shown.metavar or flag.removeprefix("--").replace("-", "_").upper()
        if choices and shown.metavar is None:
            metavar = None  # argparse shows {a,b,c}
        p.add_argument(
            flag,
            dest=name,
            type=kind,
            nargs=nargs,
            choices=choices,
            metavar=metavar,
            help=shown.help,
        )


def given_fields(args: argparse.Namespace, names: Iterable[str]) -> dict[str, object]:
    """The fields among `names` whose flags were given, as their dataclass takes them (the
    values of a flag of several as a tuple)."""
    given = {name: getattr(args, name) for name in names}
    return {
        name: tuple(value) if isinstance(value, list) else value
        for name, value in given.items()
        if value is not None
    }


def add_decode_flags(p: argparse.ArgumentParser, names: Iterable[str] = DECODE_FLAGS) -> None:
    """The flags of `DECODE_FLAGS` among `names`, typed as DecodeConfig's fields."""
    flags = {name: DECODE_FLAGS[name] for name in names}
    add_field_flags(p, flags, decode_field_types(flags))


def decode_changes(args: argparse.Namespace) -> dict[str, object]:
    """The decode settings given on the command line (`DECODE_FLAGS`); the rest come from the
    checkpoint.

    `--nbest` never changes the beam: a larger n-best than the beam is refused by the decode
    config's check, naming both values.
    """
    return given_fields(args, DECODE_FLAGS)
