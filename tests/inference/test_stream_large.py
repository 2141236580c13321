"""`tmt translate` of a file: read as it streams (the same output as a pipe, read whole), and
resumed after an interruption where it stopped, byte for byte as an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformer_mt.cli import main
from transformer_mt.cli import translate_lines as cli_lines
from transformer_mt.inference.resume import partial_paths
from transformer_mt.inference.translator import Translator
from transformer_mt.text_files import count_lines

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["ein mann", "das buch", "", "zwei hunde spielen", "frau", "im schnee", "rad"]
N_LINES, CHUNK = 22, 4  # six chunks, the last of two lines


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.txt"
    lines = [WORDS[i % len(WORDS)] for i in range(N_LINES)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def calls(monkeypatch):
    """The number of chunks translated; small chunks so that a few lines make several."""
    monkeypatch.setattr(cli_lines, "CHUNK_LINES", CHUNK)
    counted = {"chunks": 0, "stop_after": None}
    translate = Translator.translate

    def counting(self, request, *args, **kwargs):
        if counted["chunks"] == counted["stop_after"]:
            raise KeyboardInterrupt
        counted["chunks"] += 1
        return translate(self, request, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate", counting)
    return counted


def translate(checkpoint, source, out, *flags: str) -> int:
    base = ["translate", "--checkpoint", str(checkpoint), "--beam-size", "1"]
    return main([*base, "--input", str(source), "--output", str(out), *flags])


def test_a_file_streamed_equals_a_pipe_read_whole(checkpoint, source, tmp_path, monkeypatch):
    streamed = tmp_path / "streamed.txt"
    assert translate(checkpoint, source, streamed) == 0
    with open(source, "rb") as f:
        monkeypatch.setattr(sys, "stdin", f)
        assert translate(checkpoint, "-", tmp_path / "piped.txt") == 0
    assert streamed.read_bytes() == (tmp_path / "piped.txt").read_bytes()
    assert streamed.read_text(encoding="utf-8").count("\n") == N_LINES


def test_lines_are_counted_as_they_are_read(tmp_path):
    for text, lines in [(b"", 0), (b"a\n", 1), (b"a\nb", 2), (b"\n\n", 2), (b"a\r\nb\n", 2)]:
        (tmp_path / "f").write_bytes(text)
        assert count_lines(str(tmp_path / "f")) == lines


def test_an_interrupted_run_continues_where_it_stopped(checkpoint, source, tmp_path, calls):
    whole = tmp_path / "whole.txt"
    assert translate(checkpoint, source, whole) == 0
    assert calls["chunks"] == 6

    out = tmp_path / "out.txt"
    partial, sidecar = partial_paths(out)
    calls.update(chunks=0, stop_after=2)
    assert translate(checkpoint, source, out) == 130
    assert not out.exists() and partial.read_text(encoding="utf-8").count("\n") == 2 * CHUNK
    assert json.loads(sidecar.read_text(encoding="utf-8"))["lines_done"] == 2 * CHUNK

    calls.update(chunks=0, stop_after=None)
    assert translate(checkpoint, source, out) == 0
    assert calls["chunks"] == 4  # only the chunks not done
    assert out.read_bytes() == whole.read_bytes()
    assert not partial.exists() and not sidecar.exists()


def test_another_run_starts_afresh_with_a_note(checkpoint, source, tmp_path, calls, capsys):
    out = tmp_path / "out.txt"
    calls.update(stop_after=2)
    assert translate(checkpoint, source, out) == 130
    assert "8 translated line(s) kept in" in capsys.readouterr().err
    calls.update(chunks=0, stop_after=None)
    assert translate(checkpoint, source, out, "--nbest", "2", "--beam-size", "2") == 0
    err = capsys.readouterr().err
    assert "was left by another run (--beam-size, --n-best differ); starting afresh" in err
    assert calls["chunks"] == 6 and out.read_text(encoding="utf-8").count("\n") == 2 * N_LINES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]


def test_a_changed_input_starts_afresh(checkpoint, source, tmp_path, calls, capsys):
    out = tmp_path / "out.txt"
    calls.update(stop_after=2)
    assert translate(checkpoint, source, out) == 130
    source.write_text("ein mann\n" * N_LINES, encoding="utf-8")
    calls.update(chunks=0, stop_after=None)
    assert translate(checkpoint, source, out) == 0
    assert "(--input file differ)" in capsys.readouterr().err and calls["chunks"] == 6


@pytest.mark.parametrize("nbest", [1, 2])
def test_an_nbest_run_continues_where_it_stopped(checkpoint, source, tmp_path, calls, nbest):
    """The partial holds `nbest` lines a source line, which the continued run checks."""
    flags = ["--nbest", str(nbest), "--beam-size", "2"]
    whole = tmp_path / "whole.txt"
    assert translate(checkpoint, source, whole, *flags) == 0
    out = tmp_path / "out.txt"
    calls.update(chunks=0, stop_after=2)
    assert translate(checkpoint, source, out, *flags) == 130
    calls.update(chunks=0, stop_after=None)
    assert translate(checkpoint, source, out, *flags) == 0
    assert calls["chunks"] == 4 and out.read_bytes() == whole.read_bytes()


@pytest.mark.parametrize(
    "lines_done, shown",
    [
        (-5, "lines done -5"),
        (3 * CHUNK, "lines done 12"),
        (CHUNK, "lines done 4"),
        ("8", 'lines done "8"'),
    ],
)
def test_a_sidecar_that_disagrees_with_its_partial_starts_afresh(
    checkpoint, source, tmp_path, calls, capsys, lines_done, shown
):
    """A sidecar edited or damaged by hand: continuing from it would skip lines or repeat
    them; the run starts afresh instead, and says why."""
    whole = tmp_path / "whole.txt"
    assert translate(checkpoint, source, whole) == 0
    out = tmp_path / "out.txt"
    partial, sidecar = partial_paths(out)
    calls.update(chunks=0, stop_after=2)
    assert translate(checkpoint, source, out) == 130
    record = json.loads(sidecar.read_text(encoding="utf-8"))
    sidecar.write_text(json.dumps({**record, "lines_done": lines_done}), encoding="utf-8")
    capsys.readouterr()
    calls.update(chunks=0, stop_after=None)
    assert translate(checkpoint, source, out) == 0
    err = capsys.readouterr().err
    assert f"{sidecar.name} does not match {partial.name} ({shown}" in err, err
    assert calls["chunks"] == 6 and out.read_bytes() == whole.read_bytes()


def test_an_interruption_before_any_chunk_leaves_nothing(checkpoint, source, tmp_path, calls):
    calls.update(stop_after=0)
    assert translate(checkpoint, source, tmp_path / "out.txt") == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


# A run in its own process, a second per chunk after the first two, so that it is stopped
# once its partial holds two chunks (whatever the machine's speed) and before it ends.
SLOW_RUN = """
import sys, time
from transformer_mt.cli import main, translate_lines
from transformer_mt.inference.translator import Translator
translate_lines.CHUNK_LINES = {chunk}
translate, done = Translator.translate, []
def slow(self, *args, **kwargs):
    if len(done) >= 2:
        time.sleep(1.0)
    done.append(1)
    return translate(self, *args, **kwargs)
Translator.translate = slow
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("name", ["SIGKILL", "SIGTERM"])
def test_a_killed_process_is_continued_by_the_same_command(
    checkpoint, source, tmp_path, calls, name
):
    whole = tmp_path / "whole.txt"
    assert translate(checkpoint, source, whole) == 0
    out = tmp_path / "out.txt"
    partial, sidecar = partial_paths(out)
    script = SLOW_RUN.format(chunk=CHUNK)
    command = [sys.executable, "-c", script, "translate", "--checkpoint", str(checkpoint)]
    command += ["--beam-size", "1", "--input", str(source), "--output", str(out)]
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _lines_done(sidecar) < 2 * CHUNK:
            assert process.poll() is None and time.monotonic() < deadline, "no two chunks"
            time.sleep(0.02)
        process.send_signal(getattr(signal, name))
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    if name == "SIGTERM":
        assert process.returncode == 143 and "interrupted (SIGTERM)" in err, err
    done = _lines_done(sidecar)
    assert not out.exists() and done >= 2 * CHUNK and done % CHUNK == 0
    calls.update(chunks=0)
    assert translate(checkpoint, source, out) == 0
    assert calls["chunks"] == -(-(N_LINES - done) // CHUNK)
    assert out.read_bytes() == whole.read_bytes()
    assert not partial.exists() and not sidecar.exists()


def _lines_done(sidecar: Path) -> int:
    try:
        return json.loads(sidecar.read_text(encoding="utf-8"))["lines_done"]
    except (FileNotFoundError, ValueError):
        return 0


def test_an_output_written_by_a_running_process_is_refused(checkpoint, source, tmp_path):
    """The writer holds a lock on the partial; a recorded PID alone proves nothing (PIDs are
    reused: a live process that does not write had been blamed, the rerun refused)."""
    out = tmp_path / "out.txt"
    partial, sidecar = partial_paths(out)
    holder = (
        "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
        "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", holder, str(partial)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline() == "held\n"
        record = {"fingerprint": {}, "lines_done": 0, "bytes": 0, "pid": writer.pid}
        sidecar.write_text(json.dumps(record), encoding="utf-8")
        assert translate(checkpoint, source, out) == 2
    finally:
        writer.kill()
        writer.wait()
    assert os.path.exists(sidecar) and not out.exists()
    record["pid"] = os.getppid()  # alive, and no writer: the lock is gone with its process
    sidecar.write_text(json.dumps(record), encoding="utf-8")
    assert translate(checkpoint, source, out) == 0 and out.exists()


def test_each_chunk_is_asked_with_its_own_prefixes_and_constraints(
    checkpoint, source, tmp_path, calls, monkeypatch
):
    """--prefix and --constraints are read beside the input, a chunk at a time, and from the
    first line not done when an interrupted run continues."""
    lines = source.read_text(encoding="utf-8").splitlines()
    prefixes = ["das" if i % 2 else "" for i in range(N_LINES)]
    phrases = ["buch" if i % 3 == 0 and lines[i] else "" for i in range(N_LINES)]
    (tmp_path / "prefix.txt").write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    (tmp_path / "phrases.txt").write_text("\n".join(phrases) + "\n", encoding="utf-8")
    flags = ["--prefix", str(tmp_path / "prefix.txt")]
    flags += ["--constraints", str(tmp_path / "phrases.txt")]
    asked = []
    counting = Translator.translate

    def recording(self, request, *args, **kwargs):
        asked.append(request)
        return counting(self, request, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate", recording)

    def options_asked(first: int) -> None:
        assert [text for request in asked for text in request.texts] == lines[first:]
        assert [p for request in asked for p in request.prefixes] == prefixes[first:]
        constraints = [list(c) for request in asked for c in request.constraints]
        assert constraints == [[p] if p else [] for p in phrases[first:]]

    whole = tmp_path / "whole.txt"
    assert translate(checkpoint, source, whole, *flags) == 0
    assert [len(request) for request in asked] == [4, 4, 4, 4, 4, 2]
    options_asked(0)

    out = tmp_path / "out.txt"
    calls.update(chunks=0, stop_after=2)
    assert translate(checkpoint, source, out, *flags) == 130
    asked.clear()
    calls.update(chunks=0, stop_after=None)
    assert translate(checkpoint, source, out, *flags) == 0
    options_asked(2 * CHUNK)
    assert out.read_bytes() == whole.read_bytes()


@pytest.mark.parametrize("name", ["/proc/self/fd/{fd}", "/dev/fd/{fd}"])
def test_a_descriptor_open_on_a_file_is_written_through_not_replaced(
    checkpoint, source, tmp_path, name
):
    """`--output /dev/stdout` with stdout appended to a log (`>> log`): the translations go
    after what the log held, and what is written to it after them follows them."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("no /proc/self/fd on this system")
    whole = tmp_path / "whole.txt"
    assert translate(checkpoint, source, whole) == 0
    log = tmp_path / "keep.log"
    log.write_bytes(b"before\n")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        assert translate(checkpoint, source, name.format(fd=fd)) == 0
        os.write(fd, b"after\n")
    finally:
        os.close(fd)
    assert log.read_bytes() == b"before\n" + whole.read_bytes() + b"after\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "keep.log", "whole.txt"]
