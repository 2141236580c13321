"""What a careless or hostile user does to the CLI's outputs and streams: every command that
writes keeps what the user points at, and every failure is one line, never a traceback."""

import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from tests.conftest import make_run_dir, without_notes
from transformer_mt.cli import main

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "ein mann fährt rad\ndas buch\n"


def one_error_line(capsys) -> str:
    err = without_notes(capsys.readouterr().err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def translate(checkpoint, *args):
    return main(["translate", "--checkpoint", str(checkpoint), "--beam-size", "1", *args])


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text(SOURCE, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "target, message",
    [
        ("metrics.jsonl", "is the metrics log of"),
        ("checkpoints/best.pt", "is a training checkpoint of"),
        ("config.yaml", "is the config.yaml of"),
    ],
)
def test_plot_never_writes_over_the_run_it_reads(tmp_path, capsys, target, message):
    pytest.importorskip("matplotlib")
    run = make_run_dir(tmp_path)
    before = (run / target).read_bytes()
    assert main(["plot", str(run), "--out", str(run / target)]) == 2
    assert message in one_error_line(capsys)
    assert (run / target).read_bytes() == before


def test_attention_never_writes_over_its_checkpoint(checkpoint, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    copy = tmp_path / "c.pt"
    shutil.copyfile(checkpoint, copy)
    args = ["attention", "--checkpoint", str(copy), "--src", "das buch", "--out", str(copy)]
    assert main(args) == 2
    assert "is the checkpoint itself" in one_error_line(capsys)
    assert copy.read_bytes() == Path(checkpoint).read_bytes()


def test_translate_refuses_a_run_artifact_as_output(checkpoint, source, tmp_path, capsys):
    run = make_run_dir(tmp_path)
    best = run / "checkpoints" / "best.pt"
    assert translate(checkpoint, "--input", str(source), "--output", str(best)) == 2
    assert "is a training checkpoint of" in one_error_line(capsys)
    assert best.read_bytes() == b"the best weights"


def test_translate_through_a_symlink_keeps_the_link(checkpoint, source, tmp_path):
    target, link = tmp_path / "real.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    assert translate(checkpoint, "--input", str(source), "--output", str(link)) == 0
    assert link.is_symlink() and len(target.read_text(encoding="utf-8").splitlines()) == 2


def test_translate_into_a_fifo_reaches_its_reader(checkpoint, source, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text(encoding="utf-8")))
    reader.start()
    assert translate(checkpoint, "--input", str(source), "--output", str(fifo)) == 0
    reader.join(timeout=30)
    assert len(got[0].splitlines()) == 2 and stat.S_ISFIFO(fifo.stat().st_mode)


def test_translate_refuses_a_read_only_output(checkpoint, source, tmp_path, capsys):
    out = tmp_path / "out.txt"
    out.write_text("keep\n")
    out.chmod(0o444)
    assert translate(checkpoint, "--input", str(source), "--output", str(out)) == 2
    assert "is read-only" in one_error_line(capsys)
    assert out.read_text() == "keep\n" and stat.S_IMODE(out.stat().st_mode) == 0o444


def test_translate_into_a_directory_is_one_line(checkpoint, source, tmp_path, capsys):
    assert translate(checkpoint, "--input", str(source), "--output", str(tmp_path)) == 2
    assert "is a directory" in one_error_line(capsys)


@pytest.mark.parametrize("value", ["-1e308", "1e308", "11"])
def test_an_extreme_length_penalty_is_one_line(checkpoint, source, capsys, value):
    assert translate(checkpoint, "--input", str(source), f"--length-penalty={value}") == 2
    assert "length_penalty" in one_error_line(capsys)


def test_export_to_the_root_is_refused(checkpoint, capsys):
    pytest.importorskip("ctranslate2")
    assert main(["export", "--format", "ctranslate2", str(checkpoint), "/"]) == 2
    assert "names no directory of its own" in one_error_line(capsys)


def test_evaluate_removes_a_byte_order_mark_and_says_so(tmp_path, capsys, caplog):
    ref, hyp = tmp_path / "ref.txt", tmp_path / "hyp.txt"
    ref.write_text("A man rides a bike .\nTwo dogs play in the snow .\n", encoding="utf-8")
    hyp.write_bytes(b"\xef\xbb\xbf" + ref.read_bytes())
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "bleu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("BLEU") and " = 100.00 " in out
    assert f"{hyp}: starts with a UTF-8 byte order mark; it was removed" in caplog.text


def test_too_little_memory_is_one_line_with_the_sizes(tmp_path, capsys, monkeypatch):
    def allocate(*args):
        return torch.empty(2**50)  # a petabyte of float32: the allocator refuses

    monkeypatch.setattr("transformer_mt.evaluation.evaluate_files", allocate)
    assert main(["evaluate", "--hyp", "h", "--ref", "r"]) == 1
    err = one_error_line(capsys)
    assert "out of memory: the work asked for 4,194,304.0 GiB in one allocation" in err
    assert "available" in err


def _tmt(args: str, **kwargs) -> subprocess.CompletedProcess:
    """`tmt ARGS` in a shell (for closed descriptors and pipes), from the repository root."""
    command = f"{sys.executable} -m transformer_mt {args}"
    return subprocess.run(
        ["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=120, **kwargs
    )


@pytest.mark.parametrize(
    "redirect, message",
    [("<&-", "<stdin>: is closed"), (">&-", "<stdout>: is closed")],
)
def test_translate_with_stdin_or_stdout_closed_is_one_line(checkpoint, redirect, message):
    result = _tmt(f"translate --checkpoint {checkpoint} --beam-size 1 {redirect}", input="x\n")
    assert result.returncode == 2, result.stderr
    lines = without_notes(result.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), result.stderr


def test_a_reader_that_leaves_early_is_one_line(checkpoint, tmp_path):
    """`tmt translate ... | head -1` with more output than a pipe holds."""
    many = tmp_path / "many.txt"
    many.write_text("das buch\n" * 20000, encoding="utf-8")
    result = _tmt(
        f"translate --checkpoint {checkpoint} --beam-size 1 --input {many} | head -c 1 >/dev/null;"
        " exit ${PIPESTATUS[0]}"
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "error: stdout was closed by its reader (broken pipe)" in result.stderr
