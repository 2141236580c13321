"""`tmt translate` of piped input and with --ref, streamed: a pipe is translated as its lines
come, checked against the reference and per-line files as it is read, and the references are
scored a chunk at a time, to the scores and output of a file's run."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from transformer_mt.cli import main
from transformer_mt.cli import translate_lines as cli_lines
from transformer_mt.evaluation import CorpusScorer
from transformer_mt.inference.translator import Translator

WORDS = ["ein mann", "das buch", "", "zwei hunde spielen", "frau", "im schnee", "rad"]
N_LINES, CHUNK = 22, 4  # six chunks, the last of two lines
LINES = [WORDS[i % len(WORDS)] for i in range(N_LINES)]


@pytest.fixture
def chunks(monkeypatch):
    """The chunks translated (their sizes), in chunks of CHUNK lines; `first` is set once the
    first is done."""
    monkeypatch.setattr(cli_lines, "CHUNK_LINES", CHUNK)
    done: list[int] = []
    first = threading.Event()
    translate = Translator.translate

    def counting(self, request, *args, **kwargs):
        translations = translate(self, request, *args, **kwargs)
        done.append(len(translations))
        first.set()
        return translations

    monkeypatch.setattr(Translator, "translate", counting)
    return done, first


def write_lines(path, lines: list[str]):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def pipe(monkeypatch, lines: list[str], wait: threading.Event | None = None) -> list[bool]:
    """stdin from a pipe that a thread writes `lines` into: the first CHUNK, then (once `wait`
    is set, or a minute has passed) the rest. Returns [whether `wait` was set in time]."""
    read, write = os.pipe()
    monkeypatch.setattr(sys, "stdin", open(read, "rb"))  # noqa: SIM115 (closed by the test)
    seen: list[bool] = []

    def writer() -> None:
        with open(write, "wb") as f:
            f.write("".join(line + "\n" for line in lines[:CHUNK]).encode())
            f.flush()
            seen.append(wait.wait(60) if wait is not None else True)
            f.write("".join(line + "\n" for line in lines[CHUNK:]).encode())

    threading.Thread(target=writer, daemon=True).start()
    return seen


def translate(checkpoint, out, *flags) -> int:
    base = ["translate", "--checkpoint", str(checkpoint), "--beam-size", "1"]
    return main([*base, "--output", str(out), *flags])


def test_a_pipe_is_translated_as_its_lines_come(checkpoint, tmp_path, monkeypatch, chunks):
    done, first = chunks
    source = write_lines(tmp_path / "in.txt", LINES)
    assert translate(checkpoint, tmp_path / "file.txt", "--input", str(source)) == 0
    done.clear()
    first.clear()
    seen = pipe(monkeypatch, LINES, wait=first)
    try:
        assert translate(checkpoint, tmp_path / "piped.txt") == 0
    finally:
        sys.stdin.close()
    assert seen == [True]  # the first chunk was translated before the rest was written
    assert done == [4, 4, 4, 4, 4, 2]
    assert (tmp_path / "piped.txt").read_bytes() == (tmp_path / "file.txt").read_bytes()


def test_ref_is_scored_chunk_by_chunk_from_a_file_or_a_pipe(
    checkpoint, tmp_path, monkeypatch, chunks, capsys
):
    source = write_lines(tmp_path / "in.txt", LINES)
    assert translate(checkpoint, tmp_path / "hyp.txt", "--input", str(source)) == 0
    ref = write_lines(tmp_path / "ref.txt", [line.upper() + " x" for line in LINES])
    added: list[int] = []
    add = CorpusScorer.add
    monkeypatch.setattr(
        CorpusScorer, "add", lambda self, h, r: (added.append(len(r)), add(self, h, r))[1]
    )
    capsys.readouterr()
    assert main(["evaluate", "--hyp", str(tmp_path / "hyp.txt"), "--ref", str(ref)]) == 0
    evaluated = [line.split(" = ")[1] for line in capsys.readouterr().out.splitlines()]
    assert added == [len(LINES)]  # tmt evaluate's chunks are larger than these files
    added.clear()

    def scores(*flags) -> list[str]:
        assert translate(checkpoint, tmp_path / "out.txt", "--ref", str(ref), *flags) == 0
        err = capsys.readouterr().err.splitlines()
        return [line.split(" = ")[1] for line in err if line.startswith(("BLEU|", "chrF2|"))]

    from_file = scores("--input", str(source))
    assert added == [4, 4, 4, 4, 4, 2]
    pipe(monkeypatch, LINES)
    try:
        assert scores() == from_file
    finally:
        sys.stdin.close()
    assert len(from_file) == 2 and from_file == evaluated[:2]


@pytest.mark.parametrize(
    ("ref_lines", "chunks_done"),
    [(10, [4, 4]), (30, [4, 4, 4, 4, 4])],  # refused once line 11 comes / at the end
)
def test_a_pipe_without_a_reference_per_line_is_refused_as_it_is_read(
    checkpoint, tmp_path, monkeypatch, chunks, capsys, ref_lines, chunks_done
):
    done, _ = chunks
    ref = write_lines(tmp_path / "ref.txt", ["a man"] * ref_lines)
    out = tmp_path / "out.txt"
    pipe(monkeypatch, LINES)
    try:
        assert translate(checkpoint, out, "--ref", str(ref)) == 2
    finally:
        sys.stdin.close()
    err = capsys.readouterr().err
    assert f"error: <stdin> has {N_LINES} lines but {ref} has {ref_lines}" in err
    assert done == chunks_done and not out.exists()


@pytest.mark.parametrize(("prefix_lines", "ref_lines"), [(N_LINES, 10), (10, N_LINES)])
def test_a_pipe_is_counted_when_its_files_disagree_and_the_wrong_one_named(
    checkpoint, tmp_path, monkeypatch, chunks, capsys, prefix_lines, ref_lines
):
    done, _ = chunks
    ref = write_lines(tmp_path / "ref.txt", ["a man"] * ref_lines)
    prefix = write_lines(tmp_path / "prefix.txt", [""] * prefix_lines)
    pipe(monkeypatch, LINES)
    try:
        flags = ["--ref", str(ref), "--prefix", str(prefix)]
        assert translate(checkpoint, tmp_path / "out.txt", *flags) == 2
    finally:
        sys.stdin.close()
    err = capsys.readouterr().err
    if ref_lines != N_LINES:
        assert f"error: <stdin> has {N_LINES} lines but {ref} has {ref_lines}" in err
    else:
        assert f"error: {prefix}: 10 prefix line(s) for the {N_LINES} line(s) of <stdin>" in err
    assert done == []  # nothing translated


def test_a_pipe_with_prefixes_translates_as_a_file(checkpoint, tmp_path, monkeypatch, chunks):
    source = write_lines(tmp_path / "in.txt", LINES)
    prefix = write_lines(tmp_path / "prefix.txt", ["", "the"] * (N_LINES // 2))
    flags = ["--prefix", str(prefix)]
    assert translate(checkpoint, tmp_path / "file.txt", "--input", str(source), *flags) == 0
    pipe(monkeypatch, LINES)
    try:
        assert translate(checkpoint, tmp_path / "piped.txt", *flags) == 0
    finally:
        sys.stdin.close()
    assert (tmp_path / "piped.txt").read_bytes() == (tmp_path / "file.txt").read_bytes()
    rows = (tmp_path / "file.txt").read_text(encoding="utf-8").splitlines()
    prefixed = [row for i, row in enumerate(rows) if i % 2 and LINES[i]]  # empty lines stay empty
    assert len(rows) == N_LINES and all(row.startswith("the") for row in prefixed)


def test_a_file_that_grows_while_it_is_read_is_refused(checkpoint, tmp_path, monkeypatch, capsys):
    """A file is counted before it is translated; lines that come after the count (or a file
    cut short) had given an output of another number of lines, and --ref scores of part of
    it, with exit status 0."""
    monkeypatch.setattr(cli_lines, "CHUNK_LINES", CHUNK)
    source = write_lines(tmp_path / "in.txt", LINES)
    translate_chunk = Translator.translate

    def growing(self, request, *args, **kwargs):
        with open(source, "a", encoding="utf-8") as f:  # another program still writing it
            f.write("ein hund\n")
        return translate_chunk(self, request, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate", growing)
    out = tmp_path / "out.txt"
    assert main(["translate", "--checkpoint", str(checkpoint), "--input", str(source),
                 "--output", str(out), "--quiet"]) == 2  # fmt: skip
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert line.startswith(f"error: {source}: ") and f", {N_LINES} counted before" in line
    assert "the file changed while it was read" in line and not out.exists()
