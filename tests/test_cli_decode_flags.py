"""`tmt translate` has a flag for every DecodeConfig field, generated from the dataclass, and
each flag sets the field it is named after."""

import dataclasses
import typing

import pytest
import torch

from transformer_mt.cli import build_parser, main
from transformer_mt.cli.flags import DECODE_FLAGS, decode_changes, flag_name
from transformer_mt.config import DecodeConfig
from transformer_mt.inference.translator import Translator

FIELDS = dataclasses.fields(DecodeConfig)


def other_value(field: dataclasses.Field) -> object:
    """A value of `field` other than its default, of the field's type."""
    kind = typing.get_type_hints(DecodeConfig)[field.name]
    if kind is bool:
        return not field.default
    if typing.get_origin(kind) is typing.Literal:
        return next(choice for choice in typing.get_args(kind) if choice != field.default)
    if kind is int:
        return field.default + 2
    assert kind is float, f"{field.name}: a flag of type {kind} needs a case here"
    return field.default / 2


def argv(name: str, value: object) -> list[str]:
    """The command-line words that set decode field `name` to `value`."""
    flag = DECODE_FLAGS[name].flag or flag_name(name)
    if isinstance(value, bool):
        return [flag if value else "--no-" + flag.removeprefix("--")]
    return [flag, str(value)]


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_every_decode_field_has_a_translate_flag_that_sets_it(field):
    assert field.name in DECODE_FLAGS, f"decode.{field.name} has no `tmt translate` flag"
    value = other_value(field)
    args = build_parser().parse_args(
        ["translate", "--checkpoint", "x.pt", *argv(field.name, value)]
    )
    changes = decode_changes(args)
    assert changes == {field.name: value}
    assert type(changes[field.name]) is type(value)
    assert getattr(dataclasses.replace(DecodeConfig(), **changes), field.name) == value


def test_the_flags_are_the_decode_fields_and_unset_ones_leave_the_checkpoints():
    assert set(DECODE_FLAGS) == {f.name for f in FIELDS}
    args = build_parser().parse_args(["translate", "--checkpoint", "x.pt"])
    assert decode_changes(args) == {}


def test_a_choice_outside_the_literal_is_refused_by_argparse(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["translate", "--checkpoint", "x.pt", "--length-norm", "x"])
    assert "invalid choice: 'x' (choose from" in capsys.readouterr().err


@pytest.mark.parametrize(
    "words, changes",
    [
        (["--min-len", "4", "--length-norm", "none"], {"min_len": 4, "length_norm": "none"}),
        (
            ["--early-stopping", "never", "--length-norm", "power", "--length-penalty", "0.6"],
            {"early_stopping": "never", "length_norm": "power", "length_penalty": 0.6},
        ),
        (
            ["--sampling", "--top-k", "3", "--top-p", "0.9", "--temperature", "0.7"],
            {"sampling": True, "top_k": 3, "top_p": 0.9, "temperature": 0.7},
        ),
    ],
    ids=["search", "stopping", "sampling"],
)
def test_translate_with_decode_flags_equals_the_library_with_those_fields(
    checkpoint, tmp_path, words, changes
):
    source = tmp_path / "in.txt"
    source.write_text("ein mann fährt rad\ndas buch\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    torch.manual_seed(1)
    command = ["translate", "--checkpoint", str(checkpoint), "--input", str(source)]
    assert main([*command, "--output", str(out), *words]) == 0
    printed = out.read_text(encoding="utf-8").splitlines()
    torch.manual_seed(1)
    expected = Translator.from_checkpoint(str(checkpoint), **changes).translate(
        source.read_text(encoding="utf-8").splitlines()
    )
    assert printed == [t.texts[0] for t in expected]


def test_a_decode_value_the_config_refuses_is_one_line(checkpoint, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("das buch\n", encoding="utf-8")
    command = ["translate", "--checkpoint", str(checkpoint), "--input", str(source)]
    assert main([*command, "--top-p", "1.5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert err == "error: --top-p 1.5: must be in (0, 1]\n"


@pytest.mark.parametrize("words", [["--top-k", "5"], ["--temperature", "0.5", "--beam-size", "1"]])
def test_a_sampling_flag_without_sampling_is_refused(checkpoint, tmp_path, capsys, words):
    """It had been accepted and changed nothing."""
    source = tmp_path / "in.txt"
    source.write_text("das buch\n", encoding="utf-8")
    command = ["translate", "--checkpoint", str(checkpoint), "--input", str(source)]
    assert main([*command, *words]) == 2
    assert capsys.readouterr().err == (
        f"error: {words[0]} {words[1]}: changes nothing where the search does not sample "
        "(sampling false); sample, or leave it out\n"
    )
    assert main([*command, *words, "--sampling"]) == 0


@pytest.mark.parametrize(
    "words, message",
    [
        (
            ["--sampling", "--beam-size", "8"],
            "--beam-size 8: changes nothing where the translation is sampled (sampling true); "
            "search, or leave it out",
        ),
        (
            ["--sampling", "--early-stopping", "never"],
            "--early-stopping never: changes nothing where the translation is sampled",
        ),
        (
            ["--length-norm", "none", "--length-penalty", "3"],
            "--length-penalty 3: changes nothing where length_norm none raises nothing to it",
        ),
        (
            ["--length-norm", "average", "--length-penalty", "0.6"],
            "--length-penalty 0.6: changes nothing where length_norm average raises nothing",
        ),
        (
            ["--disable-unk", "--replace-unk"],
            "--replace-unk: changes nothing where no unknown piece is produced (disable_unk true)",
        ),
        (["--glossary-ignore-case"], "--glossary-ignore-case: goes with --glossary"),
    ],
)
def test_a_flag_that_another_leaves_unread_is_refused(checkpoint, tmp_path, capsys, words, message):
    """Each had been accepted and changed nothing."""
    source = tmp_path / "in.txt"
    source.write_text("das buch\n", encoding="utf-8")
    command = ["translate", "--checkpoint", str(checkpoint), "--input", str(source)]
    assert main([*command, *words]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_sampling_draws_more_samples_than_the_beam(checkpoint, tmp_path, capsys):
    """Sampling reads no beam: --nbest 8 needs no --beam-size 8."""
    source = tmp_path / "in.txt"
    source.write_text("das buch\n", encoding="utf-8")
    command = ["translate", "--checkpoint", str(checkpoint), "--input", str(source)]
    assert main([*command, "--sampling", "--nbest", "8"]) == 0
    assert main([*command, "--sampling", "--nbest", "8", "--beam-size", "1"]) == 0
    assert capsys.readouterr().out.count(" ||| ") == 32
