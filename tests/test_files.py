"""files.py: outputs appear whole or not at all, and never over their input."""

import errno
import gzip
import io
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import make_run_dir
from transformer_mt import text_files
from transformer_mt.errors import MachineError, TmtError
from transformer_mt.files import (
    atomic_open,
    atomic_path,
    check_output,
    output_folder,
    refuse_same_file,
)
from transformer_mt.temporaries import temporary_name
from transformer_mt.text_files import read_lines


def test_atomic_open_replaces_on_success_and_creates_the_folder(tmp_path):
    out = tmp_path / "new" / "out.txt"
    with atomic_open(out) as f:
        f.write("ü\n")
        assert not out.exists()  # nothing visible under the final name while writing
    assert out.read_text(encoding="utf-8") == "ü\n"
    assert list(out.parent.iterdir()) == [out]


def test_a_failed_writer_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("keep me\n")
    with pytest.raises(ValueError), atomic_open(out) as f:
        f.write("half")
        raise ValueError("line 2 is not UTF-8")
    assert out.read_text() == "keep me\n"
    assert list(tmp_path.iterdir()) == [out]


def test_a_folder_replaces_the_old_folder_whole(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "stale.bin").write_text("old")
    with atomic_path(out) as tmp:
        tmp.mkdir()
        (tmp / "model.bin").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["model.bin"]


def test_refuse_same_file_sees_through_links(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    link = tmp_path / "link.txt"
    link.symlink_to(src)
    for name in (src, link, tmp_path / "." / "in.txt"):
        with pytest.raises(TmtError, match="is the input itself"):
            refuse_same_file(src, name, "input")
    refuse_same_file(src, tmp_path / "out.txt", "input")  # a different file is fine
    assert src.read_text() == "x\n"


def _write(path, text="new\n"):
    with atomic_open(path) as f:
        f.write(text)


def test_a_symlink_stays_a_link_and_its_target_gets_the_output(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    _write(link)
    assert link.is_symlink() and link.resolve() == target
    assert target.read_text() == "new\n"


def test_a_dangling_symlink_is_followed_to_the_file_it_names(tmp_path):
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "later.txt")
    _write(link)
    assert link.is_symlink() and (tmp_path / "later.txt").read_text() == "new\n"


def test_a_fifo_is_written_through_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    _write(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert received == ["through the pipe\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_process_descriptor_name_is_written_through(tmp_path):
    """/proc/self/fd/N (and /dev/stdout, a link to it) name a descriptor: the bytes must reach
    what it is open on, a pipe here."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("no /proc/self/fd on this system")
    read_end, write_end = os.pipe()
    try:
        _write(f"/proc/self/fd/{write_end}", "to the descriptor\n")
        os.close(write_end)
        assert os.read(read_end, 100) == b"to the descriptor\n"
    finally:
        os.close(read_end)


def test_a_character_device_is_written_through_and_never_replaced(tmp_path):
    device = tmp_path / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a clone of /dev/null
        device.open("w").close()
    except (PermissionError, OSError):
        pytest.skip("cannot make or open a device node here (not root, or a nodev mount)")
    _write(device, "discarded\n")
    assert stat.S_ISCHR(device.stat().st_mode)
    assert list(tmp_path.iterdir()) == [device]


def test_a_read_only_file_is_refused_with_its_bytes_and_mode(tmp_path):
    out = tmp_path / "keep.txt"
    out.write_text("mine\n")
    out.chmod(0o444)
    with pytest.raises(TmtError, match=r"keep.txt: is read-only; make it writable"):
        _write(out)
    with pytest.raises(TmtError, match="is read-only"):
        check_output(out)
    assert out.read_text() == "mine\n" and stat.S_IMODE(out.stat().st_mode) == 0o444
    assert list(tmp_path.iterdir()) == [out]


def test_a_replaced_file_keeps_its_permissions(tmp_path):
    out = tmp_path / "private.txt"
    out.write_text("old\n")
    out.chmod(0o600)
    _write(out)
    assert out.read_text() == "new\n" and stat.S_IMODE(out.stat().st_mode) == 0o600


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_temporaries_of_dead_writers_of_the_same_output_are_removed(tmp_path):
    out = tmp_path / "out.txt"
    dead = tmp_path / temporary_name(out.name, _dead_pid())
    dead.write_text("partial output of a killed run")
    alive = tmp_path / temporary_name(out.name, os.getppid())  # a running writer's
    alive.write_text("being written")
    other = tmp_path / temporary_name("other.txt", _dead_pid())  # another output's: not ours
    other.write_text("x")
    _write(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, alive.name, other.name])


def test_a_name_of_255_bytes_has_a_temporary_within_the_limit(tmp_path):
    out = tmp_path / ("n" * 251 + ".txt")
    _write(out)
    assert out.read_text() == "new\n"
    long_names = {temporary_name("a" * 250 + x, 4194304) for x in "xy"}
    assert len(long_names) == 2 and all(len(n.encode()) <= 255 for n in long_names)


def test_a_full_disk_is_a_machine_error_and_the_old_file_stays(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    full = r"out.txt: cannot write \(No space left on device\)"
    with pytest.raises(MachineError, match=full), atomic_open(out) as f:
        f.write("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert out.read_text() == "old\n" and list(tmp_path.iterdir()) == [out]


def test_a_writer_that_hides_a_full_disk_in_its_own_error_is_still_named(tmp_path):
    """torch.save meets ENOSPC, then raises a RuntimeError of its zip writer while handling it."""
    full = "No space left on device"
    with pytest.raises(MachineError, match=full), atomic_path(tmp_path / "model.pt") as tmp:
        tmp.write_bytes(b"PK")
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] unexpected pos") from None
    assert list(tmp_path.iterdir()) == []


class QuotingError(Exception):
    """An error of a library written in Rust (safetensors' SafetensorError): no errno, the
    OS error quoted in its message."""


def test_a_full_disk_quoted_by_another_librarys_error_is_a_machine_error(tmp_path):
    """safetensors under `save_pretrained` reports ENOSPC as its own error, no OSError."""
    quoted = "Error while serializing: I/O error: No space left on device (os error 28)"
    full = r"hf: cannot write \(No space left on device\)"
    with pytest.raises(MachineError, match=full), atomic_path(tmp_path / "hf") as tmp:
        tmp.mkdir()
        (tmp / "model.safetensors").write_bytes(b"half")
        raise QuotingError(quoted)
    assert list(tmp_path.iterdir()) == []


def test_another_os_error_quoted_by_a_library_is_not_blamed_on_the_output(tmp_path):
    """Only the machine's errors are read from a message: a missing file may be an input."""
    quoted = QuotingError("No such file or directory (os error 2)")
    with pytest.raises(QuotingError), atomic_path(tmp_path / "out") as tmp:
        tmp.write_text("half")
        raise quoted
    assert list(tmp_path.iterdir()) == []


def test_an_error_of_the_writers_own_input_is_not_blamed_on_the_output(tmp_path):
    """A TmtError raised while handling a read error (a bad input line) passes unchanged."""
    with pytest.raises(TmtError, match="in.txt: cannot read"), atomic_path(tmp_path / "o") as tmp:
        tmp.write_text("half")
        try:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        except OSError:
            raise TmtError("in.txt: cannot read (Input/output error)") from None
    assert list(tmp_path.iterdir()) == []


def test_a_folder_without_permission_is_one_line(tmp_path, monkeypatch):
    """As root a mode-555 folder is writable, so the refusal the kernel gives others is
    raised by hand at the rename."""

    def refuse(src, dst):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(src))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(TmtError, match=r"out.txt: cannot write \(Permission denied\)"):
        _write(tmp_path / "out.txt")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name, what",
    [
        ("metrics.jsonl", "the metrics log of"),
        ("config.yaml", "the config.yaml of"),
        ("spm-src-ab12.model", "a tokenizer of"),
        ("checkpoints/best.pt", "a training checkpoint of"),
        ("checkpoints/step_00000100.pt", "a training checkpoint of"),
        ("checkpoints/last.pt", "a training checkpoint of"),
    ],
)
def test_run_artifacts_are_never_an_output(tmp_path, name, what):
    run = make_run_dir(tmp_path)
    with pytest.raises(TmtError, match=f"is {what} .*which training reads back"):
        check_output(run / name)
    link = tmp_path / "link"
    link.symlink_to(run / name)
    with pytest.raises(TmtError, match=what):
        check_output(link)


@pytest.mark.parametrize(
    "given, named",
    [
        ("run/metrics.jsonl", "the metrics log of run,"),
        ("run/checkpoints/best.pt", "a training checkpoint of run,"),
        ("metrics.jsonl", "the metrics log of {cwd},"),  # in the run: `.` would name nothing
    ],
)
def test_a_run_artifact_names_its_run_as_the_user_wrote_it(tmp_path, monkeypatch, given, named):
    """The run had been named by its absolute path beside the relative one the user gave."""
    make_run_dir(tmp_path)
    monkeypatch.chdir(tmp_path if given.startswith("run/") else tmp_path / "run")
    with pytest.raises(TmtError) as refused:
        check_output(given)
    assert f"{given}: is {named.format(cwd=tmp_path / 'run')} which" in str(refused.value)


def test_files_a_user_makes_inside_a_run_may_be_replaced(tmp_path):
    run = make_run_dir(tmp_path)
    for name in ("curves.png", "checkpoints/average.pt", "test.hyp"):
        check_output(run / name)


@pytest.mark.parametrize("name", ["/", ".", "out/.."])
def test_an_output_naming_no_file_is_refused(tmp_path, name, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TmtError, match="names a directory, not a file|is a directory"):
        check_output(name)
    with pytest.raises(TmtError, match="names no directory of its own"), output_folder(name):
        pass


def test_an_output_folder_that_is_not_a_directory_is_named_for_what_it_is(tmp_path):
    (tmp_path / "file").write_text("keep\n")
    os.mkfifo(tmp_path / "pipe")
    for name, kind in [("file", "a file"), ("pipe", "a named pipe")]:
        refused = pytest.raises(TmtError, match=rf"^{tmp_path / name}: {kind}.*, not a directory")
        with refused, output_folder(tmp_path / name):
            raise AssertionError("the block ran")
    assert (tmp_path / "file").read_text() == "keep\n"


def test_an_output_folder_holding_an_input_is_refused_before_any_work(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.de").write_text("keep\n")
    inputs = [(None, "nothing"), (corpus / "train.de", "training corpus")]
    for out in (corpus, tmp_path):
        refused = pytest.raises(TmtError, match=f"^{out}: holds the training corpus")
        with refused, output_folder(out, inputs):
            raise AssertionError("the block ran")
    assert (corpus / "train.de").read_text() == "keep\n"


@pytest.mark.parametrize(
    "name, what",
    [
        ("metrics.jsonl", "the metrics log of"),
        ("spm-corpus.de", "a tokenizer of"),
        ("checkpoints/best.pt", "a training checkpoint of"),
        ("checkpoints/average.pt", None),
        ("corpus.de", None),
    ],
)
def test_the_files_a_run_writes_are_named_before_the_run_exists(tmp_path, name, what):
    """What an input of a run started in tmp_path/run may not be (`tmt train --run-dir`)."""
    from transformer_mt.run_layout import run_file

    found = run_file(tmp_path / "run", tmp_path / "run" / name)
    assert found == (None if what is None else f"{what} {tmp_path / 'run'}")


def test_an_existing_directory_is_no_file_output(tmp_path):
    with pytest.raises(TmtError, match="is a directory; give a file name"):
        check_output(tmp_path)


def test_a_byte_order_mark_is_removed_from_the_first_line_only(tmp_path, caplog):
    path = tmp_path / "hyp.txt"
    path.write_bytes("\ufeffA man.\n\ufeffB\n".encode())
    assert read_lines(path) == ["A man.", "\ufeffB"]
    assert "starts with a UTF-8 byte order mark" in caplog.text


def test_reading_a_folder_says_so_in_words(tmp_path):
    with pytest.raises(TmtError) as caught:
        read_lines(tmp_path)
    assert str(caught.value) == f"{tmp_path}: cannot read (Is a directory)"


def test_a_temporary_name_of_bytes_that_are_not_utf8_fits_the_file_system():
    name = os.fsdecode(b"\xff" * 300)
    assert len(os.fsencode(temporary_name(name, 4194304))) <= 255
    short = os.fsdecode(b"\xff.txt")
    assert temporary_name(short, 12) == f".{short}.tmp12"


def test_a_line_is_read_up_to_the_longest_a_text_may_hold(monkeypatch):
    """A line of exactly the limit (its line end aside) is read; one byte more is refused,
    naming the file and the line, after reading no more than the limit."""
    monkeypatch.setattr(text_files, "MAX_LINE_BYTES", 8)
    assert list(text_files.decode_lines(io.BytesIO(b"12345678\nabc\n12345678"), "f")) == [
        "12345678",
        "abc",
        "12345678",
    ]
    stream = io.BytesIO(b"ok\n123456789" + b"x" * 100)
    with pytest.raises(TmtError, match=r"^f:2: a line longer than"):
        list(text_files.decode_lines(stream, "f"))
    assert stream.tell() == 3 + 9


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.parametrize("flag", ["--hyp", "--ref"])
def test_dev_zero_as_text_is_one_line_not_all_the_memory(flag, tmp_path, capsys):
    from transformer_mt.cli import main

    text = tmp_path / "t.txt"
    text.write_text("a\n", encoding="utf-8")
    args = {"--hyp": str(text), "--ref": str(text), flag: "/dev/zero"}
    assert main(["evaluate", *[x for pair in args.items() for x in pair]]) == 2
    err = capsys.readouterr().err
    assert (
        err == "error: /dev/zero:1: a line longer than 64 MiB; is this a text file with a "
        "sentence a line?\n"
    )


def damaged_gzip(lines: int = 2000) -> bytes:
    """A .gz whose compressed stream is damaged in the middle (not cut off)."""
    data = bytearray(gzip.compress("".join(f"Satz {i} hier.\n" for i in range(lines)).encode()))
    middle = len(data) // 2
    data[middle : middle + 16] = b"\xff" * 16
    return bytes(data)


def test_a_gz_is_counted_and_read_decompressed(tmp_path):
    path = tmp_path / "a.de.gz"
    path.write_bytes(gzip.compress(b"eins\nzwei\ndrei"))
    assert text_files.count_lines(path) == 3
    assert read_lines(path) == ["eins", "zwei", "drei"]


def test_a_damaged_gz_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "a.de.gz"
    path.write_bytes(damaged_gzip())
    with pytest.raises(TmtError, match=rf"^{re.escape(str(path))}:\d+: cannot read \("):
        read_lines(path)
    with pytest.raises(TmtError, match=rf"^{re.escape(str(path))}: cannot read \("):
        text_files.count_lines(path)


@pytest.mark.parametrize("command", ["evaluate", "translate", "score"])
def test_gz_inputs_read_as_their_text_and_a_damaged_one_is_refused(
    command, checkpoint, tmp_path, capsys
):
    """A .gz had been read as text by `translate --input` (refused as not UTF-8), counted in
    its compressed bytes by `score` ("has 3 lines but ... has 20"), and a damaged one was a
    zlib traceback."""
    from transformer_mt.cli import main

    lines = "".join(f"ein hund {i}\n" for i in range(20))
    (tmp_path / "x.de").write_text(lines, encoding="utf-8")
    (tmp_path / "x.de.gz").write_bytes(gzip.compress(lines.encode()))
    (tmp_path / "bad.de.gz").write_bytes(damaged_gzip())
    args = {
        "evaluate": ["evaluate", "--ref", str(tmp_path / "x.de"), "--hyp"],
        "translate": ["translate", "--checkpoint", str(checkpoint), "--quiet", "--input"],
        "score": [
            "score",
            "--checkpoint",
            str(checkpoint),
            "--tgt",
            str(tmp_path / "x.de"),
            "--src",
        ],  # fmt: skip
    }[command]
    assert main([*args, str(tmp_path / "x.de")]) == 0
    plain = capsys.readouterr().out
    assert main([*args, str(tmp_path / "x.de.gz")]) == 0
    assert capsys.readouterr().out == plain
    if command == "score":  # its targets are read by the same code
        return
    assert main([*args, str(tmp_path / "bad.de.gz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert re.match(
        rf"error: {re.escape(str(tmp_path / 'bad.de.gz'))}(:\d+)?: cannot read", err[-1]
    )


def test_a_standard_stream_the_process_started_without_is_refused_by_name(monkeypatch):
    """Started with stdout closed (`>&-`), descriptor 1 may be a file the process opened since:
    /dev/stdout must not write into it."""
    monkeypatch.setattr(sys, "stdout", None)
    with pytest.raises(TmtError, match=r"^/dev/stdout: stdout is closed; redirect it"):
        _write("/dev/stdout", "lost\n")


def test_a_bad_byte_is_placed_at_the_column_an_editor_shows(tmp_path):
    """The column counts characters: "Два мужчины " is 12 characters in 22 bytes."""
    path = tmp_path / "in.ru"
    path.write_bytes("Ein Hund.\nДва мужчины ".encode() + b"\xed\xa0\x80 x\n")
    with pytest.raises(TmtError) as caught:
        read_lines(path)
    assert str(caught.value) == f"{path}:2: not valid UTF-8 (byte 0xed at column 13)"
    path.write_bytes("Straße\0\n".encode())
    with pytest.raises(TmtError, match=":1: a NUL byte at column 7: "):
        read_lines(path)


def test_an_output_folders_files_get_the_usual_mode(tmp_path):
    """safetensors' model.safetensors had been readable by its owner alone, beside files
    others could read: another user could not serve the export."""
    from transformer_mt.files import output_folder

    umask = os.umask(0o022)
    try:
        with output_folder(tmp_path / "export") as folder:
            (folder / "config.json").write_text("{}")
            (folder / "model.safetensors").write_bytes(b"x")
            os.chmod(folder / "model.safetensors", 0o600)
    finally:
        os.umask(umask)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "export").iterdir()}
    assert modes == {"config.json": 0o644, "model.safetensors": 0o644}
