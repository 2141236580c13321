"""`tmt evaluate --hyp A B ... --paired bs|ar`: systems compared on one test set, with the
numbers of sacrebleu's own command line at the same settings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_mt.cli import main
from transformer_mt.comparison import compare_files
from transformer_mt.errors import TmtError

REFERENCES = Path(__file__).parent / "fixtures" / "multi30k" / "valid.en"
NUMBER = re.compile(r"\d+\.\d+")


@pytest.fixture(scope="module")
def systems(tmp_path_factory) -> tuple[list[str], str]:
    """Three made-up systems of the fixture's 400 references: words dropped from every second
    line, from every third line, and every fourth word of every line; and the references."""
    root = tmp_path_factory.mktemp("systems")
    lines = REFERENCES.read_text(encoding="utf-8").splitlines()
    variants = {
        "half.txt": [" ".join(s.split()[:-1]) if i % 2 else s for i, s in enumerate(lines)],
        "third.txt": [" ".join(s.split()[:-1]) if i % 3 == 0 else s for i, s in enumerate(lines)],
        "fourth.txt": [" ".join(w for k, w in enumerate(s.split()) if k % 4 != 3) for s in lines],
    }
    paths = []
    for name, hyps in variants.items():
        (root / name).write_text("".join(f"{h}\n" for h in hyps), encoding="utf-8")
        paths.append(str(root / name))
    return paths, str(REFERENCES)


def sacrebleu_rows(paths: list[str], ref: str, *flags: str) -> list[list[float]]:
    """The numbers of each row of sacrebleu's text table (4 decimals): a system's scores, and
    under each system but the baseline its p-values."""
    command = [sys.executable, "-m", "sacrebleu", ref, "-i", *paths, "-m", "bleu", "chrf"]
    out = subprocess.run(
        [*command, *flags, "-w", "4", "-f", "text"], capture_output=True, text=True, check=True
    ).stdout
    rows = [line for line in out.splitlines() if line.startswith("│") and NUMBER.search(line)]
    return [[float(x) for x in NUMBER.findall(line)] for line in rows]


def test_bootstrap_gives_sacrebleus_scores_intervals_and_p_values(systems):
    paths, ref = systems
    found = compare_files(paths, ref, ["bleu", "chrf"], test="bs")
    theirs = sacrebleu_rows(paths, ref, "--paired-bs")
    assert len(theirs) == 5  # the baseline, then each system and its p-values
    by_system = {}
    for s in found.scores:
        by_system.setdefault(s.system, []).append(s)
    baseline, *others = paths
    ours = [[x for s in by_system[baseline] for x in (s.score, s.mean, s.ci)]]
    for path in others:
        ours.append([x for s in by_system[path] for x in (s.score, s.mean, s.ci)])
        ours.append([s.p_value for s in by_system[path]])
    assert [[round(x, 4) for x in row] for row in ours] == theirs
    assert all(s.p_value is None for s in by_system[baseline])
    assert min(s.p_value for s in found.scores if s.p_value is not None) < 0.05


def test_approximate_randomization_gives_sacrebleus_p_values(systems):
    paths, ref = systems
    found = compare_files(paths, ref, ["bleu", "chrf"], test="ar", samples=500)
    theirs = sacrebleu_rows(paths, ref, "--paired-ar", "--paired-ar-n", "500")
    p_values = [[s.p_value for s in found.scores if s.system == path] for path in paths[1:]]
    assert [[round(p, 4) for p in row] for row in p_values] == theirs[2::2]
    assert [s.ci for s in found.scores] == [None] * 6  # no intervals from this test
    assert "ar:500" in found.signatures["BLEU"] and "seed:12345" in found.signatures["BLEU"]


def test_the_table_marks_the_baseline_and_significant_differences(systems, capsys):
    paths, ref = systems
    assert main(["evaluate", "--hyp", *paths, "--ref", ref, "--paired", "bs"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "| system | BLEU | ± 95% | p | chrF2 | ± 95% | p |"
    assert lines[2].startswith(f"| {paths[0]} (baseline) |") and lines[2].endswith("| - |")
    assert lines[3].startswith(f"| {paths[1]} |") and " * |" in out
    assert any(line.startswith("BLEU: nrefs:1|bs:1000|seed:12345") for line in lines)
    # the same files, the same numbers
    assert main(["evaluate", "--hyp", *paths, "--ref", ref, "--paired", "bs"]) == 0
    assert capsys.readouterr().out == out


def test_without_a_test_each_system_is_scored_as_alone(systems, capsys):
    paths, ref = systems
    assert main(["evaluate", "--hyp", *paths, "--ref", ref, "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["test"] is None and len(table["scores"]) == 6
    for path in paths:
        assert main(["evaluate", "--hyp", path, "--ref", ref, "--json"]) == 0
        alone = json.loads(capsys.readouterr().out)
        assert [s["score"] for s in table["scores"] if s["system"] == path] == [
            s["score"] for s in alone
        ]


def test_the_json_of_a_bootstrap_test_holds_plain_numbers(systems, capsys):
    """sacrebleu 2.6's own command line fails to write this JSON (numpy floats)."""
    paths, ref = systems
    assert main(["evaluate", "--hyp", *paths[:2], "--ref", ref, "--paired", "bs", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["test"] == "bs" and found["samples"] == 1000
    assert isinstance(found["scores"][0]["ci"], float)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--paired", "bs"], "a paired test compares systems: give two or more"),
        (["--paired-samples", "10"], "--paired-samples goes with --paired"),
        (["--paired", "ar", "--paired-samples", "0"], "0 samples: a paired test needs at least 1"),
        (
            ["--paired", "bs", "--paired-samples", "99999999999999999999"],
            "99999999999999999999 samples: paired bootstrap resampling takes at most 10,000",
        ),
    ],
)
def test_odd_requests_are_one_line(systems, capsys, args, message):
    paths, ref = systems
    assert main(["evaluate", "--hyp", paths[0], "--ref", ref, *args]) == 2
    assert message in capsys.readouterr().err


def test_a_file_given_twice_or_of_another_length_is_refused(systems, tmp_path, capsys):
    paths, ref = systems
    assert main(["evaluate", "--hyp", paths[0], paths[0], "--ref", ref, "--paired", "bs"]) == 2
    assert "given twice" in capsys.readouterr().err
    short = tmp_path / "short.txt"
    short.write_text("a man\n", encoding="utf-8")
    assert main(["evaluate", "--hyp", paths[0], str(short), "--ref", ref, "--paired", "ar"]) == 2
    assert f"{short} has 1 lines but {ref} has 400" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", "x.pt", "--paired", "bs"]) == 2
    assert "--paired goes with --hyp and --ref" in capsys.readouterr().err


def test_a_system_that_scores_as_the_baseline_is_not_called_different(systems, tmp_path, capsys):
    """A copy of the baseline under another name got sacrebleu's least p, 0.0010, and a mark
    saying it differs; nothing does. (A tenth of sacrebleu's resamples and trials: the copy's
    p-value is 1.0 whatever their number.)"""
    paths, ref = systems
    copy = tmp_path / "copy.txt"
    copy.write_bytes(Path(paths[0]).read_bytes())
    for test, samples in (("bs", 100), ("ar", 1000)):
        files = [paths[0], str(copy), paths[1]]
        found = compare_files(files, ref, ["bleu", "chrf"], test=test, samples=samples)
        p_values = {(s.system, s.metric): s.p_value for s in found.scores}
        assert p_values[str(copy), "BLEU"] == p_values[str(copy), "chrF2"] == 1.0
        assert p_values[paths[1], "BLEU"] < 0.05  # the others as sacrebleu gives them
    paired = ["--paired", "bs", "--paired-samples", "100"]
    assert main(["evaluate", "--hyp", paths[0], str(copy), "--ref", ref, *paired]) == 0
    row = capsys.readouterr().out.splitlines()[3]
    assert row.startswith(f"| {copy} |") and "1.0000" in row and "*" not in row


def test_a_file_name_that_is_not_utf8_is_shown_escaped(systems, tmp_path, capsys):
    paths, ref = systems
    odd = tmp_path / os.fsdecode(b"h\xff.en")
    odd.write_bytes(Path(paths[1]).read_bytes())
    assert main(["evaluate", "--hyp", paths[0], str(odd), "--ref", ref]) == 0
    assert "h\\udcff.en |" in capsys.readouterr().out


def test_a_bar_in_a_file_name_stays_in_its_cell(systems, tmp_path, capsys):
    paths, ref = systems
    barred = tmp_path / "a|b.en"
    barred.write_bytes(Path(paths[1]).read_bytes())
    assert main(["evaluate", "--hyp", paths[0], str(barred), "--ref", ref]) == 0
    row = capsys.readouterr().out.splitlines()[3]
    assert row.startswith(f"| {tmp_path}/a\\|b.en |") and row.count(" | ") == 2


def test_a_bootstrap_too_large_for_memory_is_refused_before_it_draws(
    systems, tmp_path, monkeypatch
):
    """sacreBLEU draws every resample's indices at once: 10,000 resamples of 100,000 sentences
    would have taken 8 GB."""
    from transformer_mt import comparison

    paths, ref = systems
    monkeypatch.setattr(comparison, "MAX_BOOTSTRAP_DRAWS", 100 * 50)
    sentences = len(Path(ref).read_text(encoding="utf-8").splitlines())
    with pytest.raises(
        TmtError, match=rf"^101 samples of {sentences:,} sentences: .* take at most"
    ):
        comparison.compare_files(paths, ref, ["bleu"], test="bs", samples=101)


@pytest.mark.parametrize("test", [None, "bs"])
def test_a_reference_saved_decomposed_compares_as_the_same_text(tmp_path, test):
    """Every score compares text in NFC, the paired tests too (evaluation.composed)."""
    import unicodedata

    lines = ["Tiếng Việt có dấu.", "Một người phụ nữ đang đọc sách."] * 5
    ref, hyps = tmp_path / "ref.vi", [tmp_path / "a.vi", tmp_path / "b.vi"]
    ref.write_text("\n".join(unicodedata.normalize("NFD", x) for x in lines) + "\n", "utf-8")
    for hyp in hyps:
        hyp.write_text("\n".join(lines) + "\n", "utf-8")
    found = compare_files([str(h) for h in hyps], str(ref), ["bleu"], test=test, samples=10)
    assert {round(s.score, 2) for s in found.scores} == {100.0}
