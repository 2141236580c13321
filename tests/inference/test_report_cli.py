"""`tmt translate --report FILE`: one JSON line per input line with each sentence's flags,
scores and retry; the translations unchanged, but for flagged lines of several sentences
translated whole (--no-split), which come out sentence by sentence; one-line errors."""

import json
import random

import pytest

from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.inference.checked import translate_checked
from transformer_mt.inference.translator import Translator

from ..conftest import WORDS, fit_tiny_checkpoint, save_tiny_checkpoint

# Each word translated to another of WORDS, in order: a translation no copy of its source.
TRANSLATED = {word: WORDS[(i + 7) % len(WORDS)] for i, word in enumerate(WORDS)}
LINES = [
    "eine frau liest das buch",
    "",
    "Ein mann fährt rad. Zwei hunde spielen, im schnee.",
    "das buch, eine frau, zwei hunde",
]


@pytest.fixture(scope="module")
def translating_checkpoint(tmp_path_factory):
    """The tiny model after 150 full-batch Adam steps on word-for-word translation
    (TRANSLATED): it writes words of its own for the first words of a line, and drops some."""
    directory = tmp_path_factory.mktemp("translating")
    path = save_tiny_checkpoint(directory)
    tokenizer = load_for_inference(path).src_tokenizer
    rng = random.Random(0)
    texts = [" ".join(rng.sample(WORDS, rng.randint(2, 7))) for _ in range(64)]
    pairs = [
        (tokenizer.encode(t), tokenizer.encode(" ".join(TRANSLATED[w] for w in t.split())))
        for t in texts
    ]
    return fit_tiny_checkpoint(path, pairs, 1e-2, 150, directory / "trained.pt")


@pytest.fixture(scope="module")
def quiet_line(translating_checkpoint):
    """The first of a few one-sentence lines that the checks do not flag with this model.
    Which ones they flag depends on the CPU that trained it (its kernels round differently,
    and 150 steps at a high learning rate carry that into the weights)."""
    candidates = [LINES[0], "zwei hunde spielen", "eine frau liest", "ein mann fährt rad"]
    translator = Translator.from_checkpoint(str(translating_checkpoint), beam_size=1)
    for line in translate_checked(translator, candidates):
        (sentence,) = line.sentences
        if not sentence.flags:
            return sentence.source
    raise AssertionError(f"the checks flag every one of {candidates}")


def translate(checkpoint, tmp_path, lines, *args):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    argv = ["translate", "--checkpoint", str(checkpoint), "--beam-size", "1"]
    assert main([*argv, "--input", str(source), "--output", str(out), *args]) == 0
    return out.read_text(encoding="utf-8").splitlines()


def read_report(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_report_holds_a_line_per_input_line_as_the_library_checks_it(
    translating_checkpoint, tmp_path
):
    report = tmp_path / "report.jsonl"
    outputs = translate(translating_checkpoint, tmp_path, LINES, "--report", str(report))
    translator = Translator.from_checkpoint(str(translating_checkpoint), beam_size=1)
    checked = translate_checked(translator, LINES)
    assert read_report(report) == [line.to_json(i) for i, line in enumerate(checked, start=1)]
    assert outputs == [line.translation.texts[0] for line in checked]
    lines = read_report(report)
    assert [len(line["sentences"]) for line in lines] == [1, 0, 2, 1]
    assert set(lines[0]["sentences"][0]) == {"source", "flags", "scores", "retried", "cleared"}


def test_with_splitting_on_the_output_file_is_the_same_byte_for_byte(
    translating_checkpoint, tmp_path
):
    report = tmp_path / "report.jsonl"
    translate(translating_checkpoint, tmp_path, LINES, "--report", str(report))
    lines = read_report(report)
    assert any(s["flags"] for line in lines for s in line["sentences"])
    assert not any(s["retried"] for line in lines for s in line["sentences"])
    checked = (tmp_path / "out.txt").read_bytes()
    translate(translating_checkpoint, tmp_path, LINES)
    assert (tmp_path / "out.txt").read_bytes() == checked


def test_without_splitting_a_flagged_line_comes_out_sentence_by_sentence(
    translating_checkpoint, quiet_line, tmp_path
):
    report = tmp_path / "report.jsonl"
    lines = [quiet_line, LINES[2], "das buch. eine frau"]  # the last: no sentence end found
    whole = translate(translating_checkpoint, tmp_path, lines, "--no-split")
    split = translate(translating_checkpoint, tmp_path, lines)
    checked = translate(
        translating_checkpoint, tmp_path, lines, "--no-split", "--report", str(report)
    )
    quiet, flagged, uncut = (line["sentences"] for line in read_report(report))
    assert quiet[0]["flags"] == [] and checked[0] == whole[0]
    assert flagged[0]["flags"] and flagged[0]["retried"] and checked[1] == split[1]
    assert uncut[0]["flags"] and not uncut[0]["retried"] and checked[2] == whole[2]


def test_with_nothing_flagged_the_output_file_is_the_same_byte_for_byte(
    translating_checkpoint, quiet_line, tmp_path
):
    quiet = [quiet_line, "", quiet_line]
    report = tmp_path / "report.jsonl"
    translate(translating_checkpoint, tmp_path, quiet, "--no-split", "--report", str(report))
    assert all(not s["flags"] for line in read_report(report) for s in line["sentences"])
    checked = (tmp_path / "out.txt").read_bytes()
    translate(translating_checkpoint, tmp_path, quiet, "--no-split")
    assert (tmp_path / "out.txt").read_bytes() == checked


def last_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1]


def test_a_report_that_cannot_be_written_is_one_line_and_nothing_is_written(
    checkpoint, tmp_path, capsys
):
    (tmp_path / "in.txt").write_text("ein mann\n", encoding="utf-8")
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    out = tmp_path / "out.txt"
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(tmp_path / "in.txt")]
    assert main([*argv, "--output", str(out), "--report", str(blocked / "report.jsonl")]) == 2
    assert last_error(capsys).startswith(f"error: {blocked / 'report.jsonl'}: cannot write")
    assert not out.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--report", "-"], "--report -: give a file name"),
        (["--report", "{input}"], "--input file"),
        (["--report", "{prefix}", "--glossary", "{prefix}"], "--glossary file"),
        (["--report", "{out}", "--prefix", "{prefix}"], "cannot keep --prefix"),
        (["--report", "{out}", "--alignments"], "cannot keep --alignments"),
        (["--report", "{out}", "--format", "html"], "--report: for --format text only"),
    ],
)
def test_a_report_the_command_cannot_keep_is_refused_in_one_line(
    checkpoint, tmp_path, capsys, args, message
):
    names = {"input": tmp_path / "in.txt", "prefix": tmp_path / "p.txt", "out": tmp_path / "r"}
    names["input"].write_text("ein mann\n", encoding="utf-8")
    names["prefix"].write_text("mann\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(names["input"])]
    assert main([*argv, *(a.format(**names) for a in args)]) == 2
    error = last_error(capsys)
    assert error.startswith("error: ") and message in error
    assert not names["out"].exists()
