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
from transformer_mt.artifacts import load_for_inference
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


def test_translate_of_a_symlink_loop_is_one_line(checkpoint, tmp_path, capsys):
    loop = tmp_path / "loop.txt"
    loop.symlink_to(tmp_path / "loop2.txt")
    (tmp_path / "loop2.txt").symlink_to(loop)
    out = tmp_path / "out.txt"
    assert translate(checkpoint, "--input", str(loop), "--output", str(out)) == 2
    assert "Too many levels of symbolic links" in one_error_line(capsys)
    assert not out.exists()


@pytest.mark.parametrize("command", ["translate", "export"])
def test_an_output_that_is_a_symlink_loop_is_one_line(
    checkpoint, source, tmp_path, capsys, command
):
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    if command == "translate":
        assert translate(checkpoint, "--input", str(source), "--output", str(loop)) == 2
    else:
        assert main(["export", "--format", "hf", str(checkpoint), str(loop)]) == 2
    assert one_error_line(capsys) == f"error: {loop}: is a symlink loop; write elsewhere\n"


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


@pytest.mark.parametrize("flag", ["--ref", "--prefix", "--constraints"])
def test_a_per_line_file_given_as_a_pipe_is_refused_by_flag(
    checkpoint, source, tmp_path, capsys, flag
):
    """Each is read twice (counted before translating, then beside the input): a pipe was
    empty the second time, and the error said "prefixes=0" or came after translating."""
    fifo = tmp_path / "lines"
    os.mkfifo(fifo)
    assert translate(checkpoint, "--input", str(source), flag, str(fifo)) == 2
    assert one_error_line(capsys) == (
        f"error: {flag} {fifo}: a named pipe (FIFO), not a regular file; it is read twice "
        "(counted before translating, then beside the input): give a file\n"
    )


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
    assert one_error_line(capsys).startswith("error: --length-penalty ")


def test_export_to_the_root_is_refused(checkpoint, capsys):
    pytest.importorskip("ctranslate2")
    assert main(["export", "--format", "ctranslate2", str(checkpoint), "/"]) == 2
    assert "names no directory of its own" in one_error_line(capsys)


def test_evaluate_removes_a_byte_order_mark_and_says_so(tmp_path):
    """In a process of its own: the library's warning is printed as the commands' are."""
    ref, hyp = tmp_path / "ref.txt", tmp_path / "hyp.txt"
    ref.write_text("A man rides a bike .\nTwo dogs play in the snow .\n", encoding="utf-8")
    hyp.write_bytes(b"\xef\xbb\xbf" + ref.read_bytes())
    result = _tmt(f"evaluate --hyp {hyp} --ref {ref} --metrics bleu")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("BLEU") and " = 100.00 " in result.stdout
    warning = f"warning: {hyp}: starts with a UTF-8 byte order mark; it was removed"
    assert result.stderr.splitlines() == [warning]


def test_too_little_memory_is_one_line_with_the_sizes(tmp_path, capsys, monkeypatch):
    def allocate(*args):
        return torch.empty(2**50)  # a petabyte of float32: the allocator refuses

    monkeypatch.setattr("transformer_mt.evaluation.evaluate_files", allocate)
    assert main(["evaluate", "--hyp", "h", "--ref", "r"]) == 1
    err = one_error_line(capsys)
    assert "out of memory: the work asked for 4,194,304.0 GiB in one allocation" in err
    assert "available" in err


def test_out_of_memory_names_a_process_limit_and_survives_its_own_message(capsys, monkeypatch):
    """Under `ulimit -v` the machine may have plenty; and with memory gone, composing the
    message may itself fail: it is still one line."""

    def exhaust(*args):
        raise MemoryError

    monkeypatch.setattr("transformer_mt.evaluation.evaluate_files", exhaust)
    monkeypatch.setattr("transformer_mt.machine.address_space_limit", lambda: 4 << 30)
    assert main(["evaluate", "--hyp", "h", "--ref", "r"]) == 1
    err = one_error_line(capsys)
    assert "this process may address at most 4.0 GiB (ulimit -v)" in err
    assert err.endswith("(use a smaller model, batch, beam or input)\n")

    def no_memory_left(err):
        raise MemoryError

    monkeypatch.setattr("transformer_mt.machine.out_of_memory_message", no_memory_left)
    assert main(["evaluate", "--hyp", "h", "--ref", "r"]) == 1
    assert one_error_line(capsys) == (
        "error: out of memory: the work asked for more memory than is available\n"
    )


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


# --- An output onto an input: every command that writes refuses every file it reads.


@pytest.fixture
def made(checkpoint, tmp_path):
    """A checkpoint whose stored config names a corpus, tokenizer text and a parent checkpoint
    in tmp_path (what it was made from), a config of another corpus, and the files translate
    reads; name -> path."""
    files = {name: tmp_path / name for name in ("in.txt", "ref.txt", "prefix.txt")}
    for name in ("train", "valid", "test", "other"):
        for lang in ("de", "en"):
            files[f"{name}.{lang}"] = tmp_path / "corpus" / f"{name}.{lang}"
    files |= {"extra.txt": tmp_path / "extra.txt", "parent.pt": tmp_path / "parent.pt"}
    files |= {"glossary.tsv": tmp_path / "glossary.tsv", "constraints.txt": tmp_path / "c.txt"}
    for path in files.values():
        path.parent.mkdir(exist_ok=True)
        path.write_text(SOURCE, encoding="utf-8")
    files["glossary.tsv"].write_text("buch\tdas buch\n", encoding="utf-8")
    state = torch.load(checkpoint, weights_only=True)
    corpus = tmp_path / "corpus"
    data = {"train": f"{corpus}/train", "valid": f"{corpus}/valid", "test": f"{corpus}/test"}
    state["config"]["data"].update(data)
    state["config"]["tokenizer"]["extra_text"] = [str(files["extra.txt"])]
    state["config"]["train"]["init_from"] = str(files["parent.pt"])
    files["model.pt"] = tmp_path / "model.pt"
    torch.save(state, files["model.pt"])
    files["config.yaml"] = tmp_path / "config.yaml"
    files["config.yaml"].write_text(f"data:\n  train: {corpus}/other\n  test: null\n")
    files["shortlist.vmap"] = tmp_path / "shortlist.vmap"
    files["shortlist.vmap"].write_text("\t▁das\n", encoding="utf-8")
    return files


# What each writing command reads of `made`: its checkpoint, what that was made from, its own.
MADE_FROM = ["model.pt", "train.de", "valid.en", "test.de", "extra.txt", "parent.pt"]
TRANSLATE_READS = ["in.txt", "ref.txt", "prefix.txt", "glossary.tsv", "shortlist.vmap"]


def _writing_command(command: str, made: dict, out: Path) -> list[str]:
    """argv of `command` reading `made`'s files and writing `out`."""
    model = str(made["model.pt"])
    if command in ("translate", "translate --report"):
        reads = ["--input", str(made["in.txt"]), "--ref", str(made["ref.txt"])]
        reads += ["--glossary", str(made["glossary.tsv"]), "--prefix", str(made["prefix.txt"])]
        reads += ["--shortlist", str(made["shortlist.vmap"])]
        where = ["--output", str(out)]
        if command == "translate --report":
            where = ["--output", str(made["in.txt"].with_name("o.txt")), "--report", str(out)]
            reads = reads[:-6] + reads[-2:]  # a report keeps no prefix
        return ["translate", "--checkpoint", model, "--beam-size", "1", *reads, *where]
    if command == "shortlist":
        config = str(made["config.yaml"])
        return ["shortlist", "--checkpoint", model, "--config", config, "--out", str(out)]
    if command == "attention":
        return ["attention", "--checkpoint", model, "--src", "das buch", "--out", str(out)]
    if command == "average":
        return ["average", model, "--out", str(out)]
    # distill writes OUT.de and OUT.en: the prefix of `out`
    config = str(made["config.yaml"])
    run_dir = str(out.parent / "distill-run")
    prefix = str(out.with_suffix(""))
    return [
        "distill",
        "--checkpoint",
        model,
        "--config",
        config,
        "--run-dir",
        run_dir,
        "--out",
        prefix,
    ]


CASES = [
    *(("translate", name) for name in [*MADE_FROM, *TRANSLATE_READS]),
    *(("translate --report", name) for name in ["model.pt", "train.en", "in.txt", "ref.txt"]),
    *(("shortlist", name) for name in [*MADE_FROM, "config.yaml", "other.de", "other.en"]),
    *(("attention", name) for name in MADE_FROM),
    *(("average", name) for name in MADE_FROM),
    *(("distill", name) for name in ["train.de", "valid.en", "other.de", "other.en"]),
]


@pytest.mark.parametrize("command, name", CASES, ids=[f"{c}-{n}" for c, n in CASES])
def test_no_command_writes_over_a_file_it_reads(made, capsys, command, name):
    """The checkpoint, the corpus, tokenizer text and parent checkpoint its stored config
    names, the --config file and its corpus, and the command's own inputs: refused by name
    before any work, the file untouched."""
    target = made[name]
    before = target.read_bytes()
    assert main(_writing_command(command, made, target)) == 2
    # distill writes OUT.de, then OUT.en: the first that is an input is named
    named = f"{target.with_suffix('')}.de" if command == "distill" else target
    assert one_error_line(capsys).startswith(f"error: {named}: is the ")
    assert target.read_bytes() == before


def test_a_checkpoints_relative_corpus_is_where_its_run_read_it(
    made, tmp_path, capsys, monkeypatch
):
    """A config's relative paths are the training directory's: run from another directory,
    translate had written over `corpus/train.de` of the training directory, and evaluate had
    looked for the test set beside itself."""
    state = torch.load(made["model.pt"], weights_only=True)
    state["config"]["data"].update(train="corpus/train", valid="corpus/valid", test="corpus/test")
    state["workdir"] = str(tmp_path)
    model = tmp_path / "relative.pt"
    torch.save(state, model)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "corpus").mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    target, before = made["train.de"], made["train.de"].read_bytes()
    args = ["translate", "--checkpoint", str(model), "--input", str(made["in.txt"])]
    assert main([*args, "--output", str(target)]) == 2
    assert one_error_line(capsys).startswith(f"error: {target}: is the training corpus")
    assert target.read_bytes() == before
    assert main([*args, "--output", "corpus/train.de"]) == 0  # this directory's: no input
    assert main(["evaluate", "--checkpoint", str(model)]) == 0  # its test set found, scored
    shortlist = ["shortlist", "--checkpoint", str(model), "--out", str(tmp_path / "s.vmap")]
    assert main(shortlist) == 0  # its corpus found there too
    capsys.readouterr()
    state["workdir"] = str(tmp_path / "gone")  # moved: the path as it stands, named
    torch.save(state, model)
    assert main(["evaluate", "--checkpoint", str(model)]) == 2
    assert one_error_line(capsys).startswith(
        "error: --test: the checkpoint's test set: corpus/test.de not found"
    )
    # A directory of that name without the files (the project moved): the files here are read,
    # and an output over them refused.
    (tmp_path / "gone").mkdir()
    for name in ("test.de", "test.en", "train.de", "train.en"):
        shutil.copy(made[name], elsewhere / "corpus" / name)
    assert main(["evaluate", "--checkpoint", str(model)]) == 0
    assert main([*args, "--output", "corpus/train.de"]) == 2


def test_distill_never_writes_over_its_teacher(made, tmp_path, capsys):
    teacher = tmp_path / "teacher.en"
    teacher.write_bytes(made["model.pt"].read_bytes())
    args = ["distill", "--checkpoint", str(teacher), "--config", str(made["config.yaml"])]
    assert main([*args, "--run-dir", str(tmp_path / "r"), "--out", str(tmp_path / "teacher")]) == 2
    assert "is the teacher checkpoint itself" in one_error_line(capsys)
    assert teacher.read_bytes() == made["model.pt"].read_bytes()


@pytest.mark.parametrize("fmt", ["hf", "ctranslate2"])
def test_export_refuses_a_directory_holding_what_it_reads(made, capsys, fmt):
    pytest.importorskip("transformers" if fmt == "hf" else "ctranslate2")
    corpus = made["train.de"].parent
    before = {path: path.read_bytes() for path in corpus.iterdir()}
    assert main(["export", str(made["model.pt"]), str(corpus), "--format", fmt]) == 2
    assert one_error_line(capsys).startswith(f"error: {corpus}: holds the training corpus")
    assert {path: path.read_bytes() for path in corpus.iterdir()} == before


def test_train_refuses_a_run_directory_that_would_write_over_its_inputs(tmp_path, capsys):
    """Fine-tuning from a run's best.pt into that same run would replace it while reading it."""
    run = make_run_dir(tmp_path)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("train.de", "train.en", "valid.de", "valid.en"):
        (corpus / name).write_text(SOURCE, encoding="utf-8")
    config = tmp_path / "finetune.yaml"
    config.write_text(
        f"data:\n  train: {corpus}/train\n  valid: {corpus}/valid\n  test: null\n"
        f"train:\n  init_from: {run}/checkpoints/best.pt\n"
    )
    assert main(["train", "--config", str(config), "--run-dir", str(run)]) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"error: {run}/checkpoints/best.pt: the parent checkpoint")
    assert "is a training checkpoint of" in err
    assert (run / "checkpoints" / "best.pt").read_bytes() == b"the best weights"


# --- Signals: SIGTERM and SIGHUP end a command as Ctrl-C does.


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_removes_the_temporary_output_and_is_one_line(checkpoint, tmp_path, name):
    """`tmt translate` reading a terminal, stopped while its output is a temporary: no
    temporary left, 128 + signal, one line. The signal is sent once the temporary exists and
    the command waits for the next line, whatever the machine's speed."""
    import pty
    import signal
    import time

    signum = getattr(signal, name)
    out = tmp_path / "out.txt"
    main_fd, terminal = pty.openpty()
    command = [sys.executable, "-m", "transformer_mt", "translate", "--checkpoint"]
    command += [str(checkpoint), "--beam-size", "1", "--output", str(out)]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdin=terminal,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(".out.txt.tmp*")) and process.poll() is None:
            assert time.monotonic() < deadline, "no temporary output appeared"
            time.sleep(0.05)
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
        os.close(main_fd)
        os.close(terminal)
    assert process.returncode == 128 + signum, err
    assert without_notes(err) == f"interrupted ({name})\n"
    assert list(tmp_path.iterdir()) == []


def _as_from_a_terminal() -> None:
    """In the child: the signals a terminal delivers at their defaults. Started in the
    background (`make test &`, `nohup`), a process inherits SIGINT and SIGHUP ignored, and the
    command rightly leaves a signal alone that was ignored when it started."""
    import signal

    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _signal_self(*args, **kwargs):
    import signal

    os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize(
    "command, writer",
    [
        ("shortlist", "transformer_mt.shortlist.vmap.Vocabularies.line"),
        ("average", "transformer_mt.artifacts.torch.save"),
    ],
)
def test_sigterm_in_any_writing_command_leaves_no_temporary(
    made, tmp_path, capsys, monkeypatch, command, writer
):
    """The signal arrives while the output is being written (in-process: the handler `main`
    sets raises where the writer is)."""
    monkeypatch.setattr(writer, _signal_self)
    out = tmp_path / "out" / "result"
    assert main(_writing_command(command, made, out)) == 143
    assert without_notes(capsys.readouterr().err).endswith("interrupted (SIGTERM)\n")
    assert list(out.parent.iterdir()) == []


def test_a_signal_ignored_at_the_start_stays_ignored():
    """`nohup tmt ...`: SIGHUP stays ignored, as it was when the command started."""
    import signal

    from transformer_mt.cli.signals import interrupting_signals

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interrupting_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, previous)


# --- A user's value in a message: escaped and cut, one line whatever it holds.


@pytest.mark.parametrize(
    "flag, value, shown",
    [
        ("--tgt-lang", "fr\nerror: forged", "--tgt-lang fr\\nerror: forged: "),
        ("--tgt-lang", "x" * 5000, "--tgt-lang " + "x" * 200 + "...: "),
        ("--src-lang", "de\r\x1b[2J", "--src-lang de\\r\\x1b[2J: "),
    ],
)
def test_a_language_code_is_escaped_and_cut(checkpoint, source, capsys, flag, value, shown):
    assert translate(checkpoint, "--input", str(source), flag, value) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"error: {shown}") and len(err) < 400, err


def test_a_file_name_with_a_newline_is_one_line(checkpoint, tmp_path, capsys):
    name = tmp_path / "a\nerror: forged"
    assert translate(checkpoint, "--input", str(name)) == 2
    assert (
        one_error_line(capsys)
        == f"error: {tmp_path}/a\\nerror: forged: No such file or directory\n"
    )


def test_an_argparse_error_is_one_line_quoting_a_long_value_cut(checkpoint, capsys):
    """As every other error: no usage block in front of it."""
    with pytest.raises(SystemExit) as stop:
        translate(checkpoint, "--max-tokens", "9" * 5000 + "x")
    assert stop.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: argument --max-tokens: invalid int value")
    assert line.endswith("(see tmt translate --help)") and len(line) < 1100


def test_a_direction_is_escaped_and_cut(checkpoint, capsys):
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--directions", "de\n" * 3000]) == 2
    err = one_error_line(capsys)
    assert err.startswith("error: --directions 'de\\nde\\n") and len(err) < 300


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_evaluate_refuses_a_test_set_that_is_a_pipe(checkpoint, tmp_path, capsys):
    """Before translating (a reader would wait on the pipe for a writer that never comes), and
    naming the flag that gave the path, not the config."""
    data = load_for_inference(str(checkpoint)).config.data
    os.mkfifo(tmp_path / f"test.{data.src_lang}")
    (tmp_path / f"test.{data.tgt_lang}").write_text("a\n", encoding="utf-8")
    args = ["--test", str(tmp_path / "test"), "--no-off-target"]
    assert main(["evaluate", "--checkpoint", str(checkpoint), *args]) == 2
    pipe = tmp_path / f"test.{data.src_lang}"
    assert one_error_line(capsys) == (
        f"error: --test {tmp_path / 'test'}: {pipe} is a named pipe (FIFO), not a regular file\n"
    )


def test_evaluate_of_a_checkpoint_without_a_test_set_names_the_flag(checkpoint, tmp_path, capsys):
    state = torch.load(checkpoint, weights_only=False)
    state["config"]["data"]["test"] = None
    torch.save(state, tmp_path / "no-test.pt")
    assert main(["evaluate", "--checkpoint", str(tmp_path / "no-test.pt")]) == 2
    assert one_error_line(capsys) == (
        "error: --test: the checkpoint's config sets no data.test; give one\n"
    )


# --- A full disk: status 1 and one line, from every writing command.


def _full_disk(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize(
    "command, writer",
    [
        ("translate", "transformer_mt.inference.stream.translate_stream"),
        ("shortlist", "transformer_mt.shortlist.vmap.Vocabularies.line"),
        ("average", "transformer_mt.artifacts.torch.save"),
    ],
)
def test_a_full_disk_is_one_line_from_every_writing_command(
    made, tmp_path, capsys, monkeypatch, command, writer
):
    monkeypatch.setattr(writer, _full_disk)
    out = tmp_path / "out" / "result"
    assert main(_writing_command(command, made, out)) == 1
    err = one_error_line(capsys)
    assert err == f"error: {out}: cannot write (No space left on device)\n"
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--temperature", "0", "--sampling"], "error: --temperature 0: must be in [0.01, 100]"),
        (["--nbest", "3", "--beam-size", "2"], "error: --nbest 3 must be <= --beam-size 2"),
    ],
)
def test_a_decode_value_a_flag_set_is_named_by_its_flag(checkpoint, source, capsys, flags, message):
    """A rule of one key names the flag that set it; one across keys names the keys (the
    checkpoint may have set the other)."""
    assert main(["translate", "--checkpoint", str(checkpoint), "--input", str(source), *flags]) == 2
    assert one_error_line(capsys).startswith(message)
