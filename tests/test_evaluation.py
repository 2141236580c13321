"""Evaluation: our scores equal sacrebleu's command line on the same files; errors name files."""

import json
import re
import subprocess
import sys

import pytest

from transformer_mt.cli import main
from transformer_mt.errors import TmtError
from transformer_mt.evaluation import corpus_scores, evaluate_files, iter_segments

REFERENCES = [
    "The cat sat on the mat.",
    "Hello World, how are you?",
    "Zürich liegt am See — nicht am Meer.",
    "",
    "A fourth line with trailing spaces   ",
    "Short.",
]
HYPOTHESES = [
    "the cat sat on a mat.",
    "hello world how are you",
    "Zürich liegt am see, nicht am Meer.",
    "Something where the reference is empty",
    "A fourth line with trailing spaces",
    "SHORT .",
]


@pytest.fixture
def files(tmp_path):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("\n".join(HYPOTHESES) + "\n", encoding="utf-8")
    ref.write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    return hyp, ref


def sacrebleu_cli(hyp, ref, lowercase: bool) -> list[dict]:
    """sacrebleu's own command line on the files, as JSON with 4 decimals."""
    # Our `lowercase` is one switch for every metric; sacrebleu has one per metric and its TER
    # is case-insensitive unless told otherwise.
    case = ["-lc", "--chrf-lowercase"] if lowercase else ["--ter-case-sensitive"]
    command = [sys.executable, "-m", "sacrebleu", str(ref), "-i", str(hyp)]
    command += ["-m", "bleu", "chrf", "ter", "-w", "4", *case]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(output)


@pytest.mark.parametrize("lowercase", [False, True])
def test_scores_equal_the_sacrebleu_command_line(files, lowercase):
    hyp, ref = files
    ours = evaluate_files(hyp, ref, metrics=("bleu", "chrf", "ter"), lowercase=lowercase)
    theirs = sacrebleu_cli(hyp, ref, lowercase)
    assert [s.name for s in ours] == [t["name"] for t in theirs]
    assert [s.signature for s in ours] == [t["signature"] for t in theirs]
    assert [s.score for s in ours] == pytest.approx([t["score"] for t in theirs], abs=1e-4)
    for score in ours:
        assert score.string.startswith(f"{score.name}|{score.signature} = ")
    assert ("case:lc" in ours[0].signature) == lowercase


def test_lowercase_raises_scores_on_case_errors(files):
    cased = evaluate_files(*files, metrics=("bleu", "chrf", "ter"))
    lowered = evaluate_files(*files, metrics=("bleu", "chrf", "ter"), lowercase=True)
    assert lowered[0].score > cased[0].score and lowered[1].score > cased[1].score
    assert lowered[2].score < cased[2].score  # TER is an error rate


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("a\nb\nc\n", encoding="utf-8")
    ref.write_text("a\nb\nc\nd\n", encoding="utf-8")
    with pytest.raises(TmtError, match=re.escape(f"{hyp} has 3 lines but {ref} has 4")):
        evaluate_files(hyp, ref)


@pytest.mark.parametrize("chunk", [1, 4, 6, 100])
def test_files_scored_a_chunk_at_a_time_equal_the_whole(files, monkeypatch, chunk):
    """Chunks shorter than, across and longer than the files: the same scores and strings."""
    monkeypatch.setattr("transformer_mt.evaluation.CHUNK_SEGMENTS", chunk)
    metrics = ("bleu", "chrf", "ter")
    whole = corpus_scores(HYPOTHESES, [r.rstrip() for r in REFERENCES], metrics)
    assert evaluate_files(*files, metrics) == whole


def test_cli_counts_the_lines_scored_in_a_log(files, monkeypatch, capsys):
    """Without a terminal, a plain progress line as each chunk is scored (every 0 s here)."""
    monkeypatch.setattr("transformer_mt.evaluation.CHUNK_SEGMENTS", 4)
    monkeypatch.setattr("transformer_mt.progress.PROGRESS_SECONDS", 0.0)
    hyp, ref = files
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "bleu"]) == 0
    said = capsys.readouterr()
    lines = [line.split(",")[0] for line in said.err.splitlines()]
    assert lines == ["scored 4 lines", "scored 6 lines"]
    assert said.out.startswith("BLEU|")


@pytest.mark.parametrize("hyp_lines, ref_lines", [(9, 4), (4, 9), (8, 7)])
def test_a_mismatch_past_the_first_chunk_counts_the_longer_file(
    tmp_path, monkeypatch, hyp_lines, ref_lines
):
    monkeypatch.setattr("transformer_mt.evaluation.CHUNK_SEGMENTS", 3)
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("a b c\n" * hyp_lines, encoding="utf-8")
    ref.write_text("a b c\n" * ref_lines, encoding="utf-8")
    expected = f"{hyp} has {hyp_lines} lines but {ref} has {ref_lines}"
    with pytest.raises(TmtError, match=re.escape(expected)):
        evaluate_files(hyp, ref)


def test_bad_utf8_names_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nstill fine\nbroken \xff here\n")
    with pytest.raises(TmtError, match=re.escape(f"{bad}:3: not valid UTF-8")):
        list(iter_segments(bad))


def test_missing_file_is_named(tmp_path):
    with pytest.raises(TmtError, match="missing.txt: file not found"):
        evaluate_files(tmp_path / "missing.txt", tmp_path / "missing.txt")


def test_lines_split_at_newline_only_and_keep_empty_lines(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes("one\rstill one  \n\nthree\u2028same line".encode())
    assert list(iter_segments(path)) == ["one\rstill one", "", "three\u2028same line"]


def test_a_reference_saved_decomposed_scores_as_the_same_text(tmp_path):
    """macOS saves "ế" as "e" and two combining marks: sacrebleu compares code points, so the
    same words had scored BLEU 6.55, chrF 22.13 against themselves."""
    import unicodedata

    lines = [
        "Tiếng Việt có dấu và một người đàn ông đang đi xe đạp.",
        "Một người phụ nữ đang đọc một cuốn sách ở công viên.",
    ]
    decomposed = [unicodedata.normalize("NFD", line) for line in lines]
    assert decomposed != lines
    for scores in (
        corpus_scores(lines, decomposed),
        corpus_scores(decomposed, lines),
    ):
        assert [round(s.score, 2) for s in scores] == [100.0, 100.0]
    hyp, ref = tmp_path / "hyp.vi", tmp_path / "ref.vi"
    hyp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ref.write_text("\n".join(decomposed) + "\n", encoding="utf-8")
    assert [round(s.score, 2) for s in evaluate_files(hyp, ref)] == [100.0, 100.0]


def test_unknown_metric_and_count_mismatch_in_memory():
    with pytest.raises(TmtError, match="unknown metric 'meteor'"):
        corpus_scores(["a"], ["a"], metrics=("meteor",))
    with pytest.raises(TmtError, match="2 hypotheses but 1 references"):
        corpus_scores(["a", "b"], ["a"])


def test_cli_prints_one_line_per_metric_or_json(files, capsys):
    hyp, ref = files
    metrics = ["--metrics", "bleu", "ter", "bleu"]  # each printed once
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), *metrics]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("|")[0] for line in lines] == ["BLEU", "TER"]
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--lowercase", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = evaluate_files(hyp, ref, lowercase=True)
    assert [r["name"] for r in report] == ["BLEU", "chrF2"]
    assert [r["score"] for r in report] == [s.score for s in expected]
    assert all(set(r) == {"name", "score", "signature", "string"} for r in report)


def test_cli_reports_a_mismatch_as_one_error_line(tmp_path, capsys):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("a\n", encoding="utf-8")
    ref.write_text("a\nb\n", encoding="utf-8")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "has 1 lines but" in err and err.count("\n") == 1


def test_empty_files_are_refused_naming_both(tmp_path, capsys):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_bytes(b"")
    ref.write_bytes(b"")
    with pytest.raises(TmtError, match=re.escape(f"{hyp} and {ref} are empty: there is nothing")):
        evaluate_files(hyp, ref)
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "are empty" in err and err.count("\n") == 1
    with pytest.raises(TmtError, match="no segments to score"):
        corpus_scores([], [])
