"""`tmt translate`: line count kept, order restored, batch == single, one-line errors."""

import subprocess
import sys

import pytest

from transformer_mt.translate import Translator

from .conftest import WORDS


def run_cli(*args, stdin: bytes = b""):
    return subprocess.run(
        [sys.executable, "-m", "transformer_mt", "translate", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def test_line_count_kept_with_empty_long_and_unicode_lines(checkpoint, tmp_path):
    lines = [
        "ein mann fährt rad",
        "",
        "   ",
        " ".join(WORDS * 10),  # far beyond max_positions=64
        "zwei hunde 🐕🐕 spielen — «im» schnee ß Ω 漢字",
        "",
    ]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    result = run_cli("--checkpoint", str(checkpoint), "--input", str(source), "--output", str(out))
    assert result.returncode == 0, result.stderr.decode()
    produced = out.read_text(encoding="utf-8").split("\n")
    assert produced[-1] == "" and len(produced) - 1 == len(lines)
    assert produced[1] == produced[2] == produced[5] == ""
    assert b"1 line(s) longer" in result.stderr


def test_stdin_to_stdout_and_nbest(checkpoint):
    result = run_cli(
        "--checkpoint", str(checkpoint), "--nbest", "2", stdin=b"ein mann\n\ndas buch\n"
    )
    assert result.returncode == 0, result.stderr.decode()
    rows = result.stdout.decode().splitlines()
    # Two hypotheses per sentence; an empty line has one, the empty translation.
    assert [r.split(" ||| ")[0] for r in rows] == ["0", "0", "1", "2", "2"]
    assert rows[2] == "1 |||  ||| 0.0000"


def test_batch_equals_each_sentence_alone(checkpoint):
    translator = Translator.from_checkpoint(str(checkpoint), beam_size=3)
    lines = ["ein mann fährt rad", "das buch", "", "zwei hunde spielen im schnee eine frau"]
    together = [t.texts for t in translator.translate(lines)]
    alone = [translator.translate([line])[0].texts for line in lines]
    assert together == alone


@pytest.mark.parametrize(
    "stdin,args,message",
    [
        (b"ok\n\xff\xfe\n", [], "<stdin>:2: invalid UTF-8"),
        (b"", ["--input", "/no/such/file"], "/no/such/file"),
        (b"", ["--beam-size", "0"], "decode.beam_size=0 must be > 0"),
    ],
)
def test_bad_input_gives_one_line_error(checkpoint, stdin, args, message):
    result = run_cli("--checkpoint", str(checkpoint), *args, stdin=stdin)
    stderr = result.stderr.decode().strip()
    assert result.returncode == 2
    assert message in stderr and "Traceback" not in stderr and len(stderr.splitlines()) == 1


def test_missing_checkpoint_is_one_line(tmp_path):
    result = run_cli("--checkpoint", str(tmp_path / "none.pt"))
    assert result.returncode == 2 and b"checkpoint not found" in result.stderr
