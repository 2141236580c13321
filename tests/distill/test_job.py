"""The teacher's translation job: the same output as the Translator, resuming after SIGKILL
without translating finished chunks again, and one-line refusals."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import without_notes
from transformer_mt.cli import main
from transformer_mt.distill.filtering import DEFAULT_RULES, TeacherFilter
from transformer_mt.distill.job import TeacherSettings, distill
from transformer_mt.distill.manifest import MANIFEST_NAME
from transformer_mt.errors import TmtError
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.translator import Translator
from transformer_mt.text_files import read_lines

from .conftest import write_config, write_corpus

REPO = Path(__file__).resolve().parents[2]


def test_the_corpus_is_the_translators_output_filtered(reversing_checkpoint, corpus, tmp_path):
    settings = TeacherSettings(chunk_lines=4, decode={"beam_size": 3})
    done = distill(reversing_checkpoint, corpus, tmp_path / "run", settings=settings)
    sources = read_lines(f"{corpus.train}.de")
    translator = Translator.from_checkpoint(
        str(reversing_checkpoint), beam_size=3, lines=LineSettings(split_sentences=False)
    )
    expected = [t.texts[0] for t in translator.translate(sources)]
    chunks = sorted((tmp_path / "run" / "chunks").iterdir())
    assert [path.name for path in chunks] == [f"{k:05d}.txt" for k in range(6)]
    assert [line for path in chunks for line in read_lines(path)] == expected
    judge = TeacherFilter(DEFAULT_RULES)
    kept = [(s, t) for s, t in zip(sources, expected, strict=True) if judge.verdict(s, t) is None]
    assert done.report == judge.report
    assert (done.lines, done.chunks, done.reused_chunks, done.translated) == (23, 6, 0, 23)
    assert done.report.empty >= 1 and done.report.kept == len(kept) > 0
    assert done.outputs == (tmp_path / "run" / "train.de", tmp_path / "run" / "train.en")
    assert read_lines(done.outputs[0]) == [s for s, _ in kept]
    assert read_lines(done.outputs[1]) == [t for _, t in kept]
    dropped = read_lines(tmp_path / "run" / "dropped.tsv")
    assert len(dropped) == 23 - len(kept) and "empty\t\t" in dropped


def test_a_second_distillation_of_one_directory_is_refused(reversing_checkpoint, corpus, tmp_path):
    """Two had translated the same chunks side by side, their lines interleaved in the log."""
    from transformer_mt.distill.manifest import LOCK_NAME
    from transformer_mt.run_lock import lock_run_dir

    settings = TeacherSettings(chunk_lines=4)
    run = tmp_path / "run"
    distill(reversing_checkpoint, corpus, run, settings=settings)
    refused = pytest.raises(TmtError, match=rf"^{run}: another distillation is using it \(")
    with lock_run_dir(run, LOCK_NAME, "distillation"), refused:  # as a first run holds it
        distill(reversing_checkpoint, corpus, run, settings=settings)
    assert distill(reversing_checkpoint, corpus, run, settings=settings).reused_chunks == 6
    assert not (run / LOCK_NAME).exists()


# Run in a child process: `tmt distill`, killed by SIGKILL while the third chunk file is
# half written (after its temporary is created, before the rename).
KILLED_CHILD = textwrap.dedent(
    """
    import contextlib, os, signal, sys
    from transformer_mt.cli import main
    from transformer_mt.distill import job

    real_atomic_open, writes = job.atomic_open, []

    @contextlib.contextmanager
    def atomic_open(path, *args):
        writes.append(path)
        with real_atomic_open(path, *args) as f:
            if len(writes) == 3:
                f.write("half a chunk\\n")
                f.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            yield f

    job.atomic_open = atomic_open
    sys.exit(main(sys.argv[1:]))
    """
)


def test_a_run_killed_by_sigkill_resumes_without_translating_finished_chunks(
    reversing_checkpoint, corpus, tmp_path
):
    config = write_config(tmp_path / "config.yaml", corpus)
    args = ["distill", "--checkpoint", str(reversing_checkpoint), "--config", str(config)]
    args += ["--chunk-lines", "4", "--beam-size", "2"]
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = [sys.executable, "-c", KILLED_CHILD, *args, "--run-dir", str(run)]
    killed = subprocess.run(child, cwd=REPO, env=env, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    chunks = run / "chunks"
    assert sorted(p.name for p in chunks.iterdir() if not p.name.startswith(".")) == [
        "00000.txt",
        "00001.txt",
    ]
    assert [p.name for p in chunks.glob(".00002.txt.tmp*")]  # the half-written chunk
    assert not (run / "train.en").exists()
    finished = {p.name: p.stat().st_mtime_ns for p in chunks.glob("0*.txt")}

    assert main([*args, "--run-dir", str(run)]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in chunks.glob("0000[01].txt")} == finished
    assert not list(chunks.glob(".*"))  # the killed run's temporary is gone
    log = (run / "distill.log").read_text().splitlines()
    resumed = log[[k for k, line in enumerate(log) if "distilling 23 lines" in line][-1] :]
    assert "6 chunk(s) of 4 lines, 2 finished before" in resumed[0]
    assert [line.split()[3] for line in resumed if " chunk " in line] == [
        "3/6:",
        "4/6:",
        "5/6:",
        "6/6:",
    ]
    assert any("translated 15 lines in" in line for line in resumed)

    whole = tmp_path / "whole"
    assert main([*args, "--run-dir", str(whole)]) == 0
    for name in ("train.de", "train.en", "dropped.tsv", *(f"chunks/{k:05d}.txt" for k in range(6))):
        assert (run / name).read_bytes() == (whole / name).read_bytes(), name


def test_a_run_directory_of_another_distillation_is_refused_naming_what_differs(
    reversing_checkpoint, corpus, tmp_path, capsys
):
    config = write_config(tmp_path / "config.yaml", corpus)
    args = ["distill", "--checkpoint", str(reversing_checkpoint), "--config", str(config)]
    args += ["--run-dir", str(tmp_path / "run"), "--chunk-lines", "8"]
    assert main([*args, "--beam-size", "2"]) == 0
    capsys.readouterr()
    assert main([*args, "--beam-size", "3"]) == 2
    err = without_notes(capsys.readouterr().err).splitlines()
    assert err == [
        f"error: {tmp_path / 'run'}: holds another distillation (decode.beam_size: 2 there, "
        "3 here); resume it with its own settings, or distill into another directory"
    ]
    other = write_corpus(tmp_path / "other")
    (tmp_path / "other" / "train.de").write_text("ein hund\n" * 23)
    assert main([*args, "--beam-size", "2", "--set", f"data.train={other.train}"]) == 2
    assert f"corpus: {corpus.train} there, {other.train} here, other contents" in (
        capsys.readouterr().err
    )
    assert main([*args, "--beam-size", "2"]) == 0  # its own settings: resumed, nothing to do
    assert "3 chunk(s) of 8 lines, 3 finished before" in (tmp_path / "run/distill.log").read_text()


def test_a_manifest_from_before_a_decode_field_existed_resumes(
    reversing_checkpoint, corpus, tmp_path, capsys
):
    """A decode field added later (early_stopping) is missing from an older manifest: that run
    searched as the field's default does, so the same command resumes it."""
    config = write_config(tmp_path / "config.yaml", corpus)
    args = ["distill", "--checkpoint", str(reversing_checkpoint), "--config", str(config)]
    args += ["--run-dir", str(tmp_path / "run"), "--chunk-lines", "8"]
    assert main(args) == 0
    path = tmp_path / "run" / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    del manifest["decode"]["early_stopping"]
    path.write_text(json.dumps(manifest))
    assert main(args) == 0
    assert main([*args, "--early-stopping", "never"]) == 2
    assert "decode.early_stopping: 'k_finished' there, 'never' here" in capsys.readouterr().err


def test_a_directory_holding_other_files_or_a_broken_manifest_is_refused(
    reversing_checkpoint, corpus, tmp_path
):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(TmtError, match=f"holds files but no {MANIFEST_NAME}"):
        distill(reversing_checkpoint, corpus, tmp_path / "run")
    (tmp_path / "run" / MANIFEST_NAME).write_text('{"teacher": "x"}')
    with pytest.raises(
        TmtError, match="manifest.json: not a distillation manifest .no teacher_sha"
    ):
        distill(reversing_checkpoint, corpus, tmp_path / "run")
    (tmp_path / "run" / MANIFEST_NAME).write_text('{"teacher": "x", "decode": [1]}')
    with pytest.raises(TmtError, match="not a distillation manifest .its decode is not a mapping"):
        distill(reversing_checkpoint, corpus, tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [MANIFEST_NAME, "notes.txt"]


def test_a_teacher_of_another_direction_is_refused_in_one_line(
    reversing_checkpoint, tmp_path, capsys
):
    data = write_corpus(tmp_path / "corpus", "en", "de")
    config = write_config(tmp_path / "config.yaml", data)
    args = ["distill", "--checkpoint", str(reversing_checkpoint), "--config", str(config)]
    assert main([*args, "--run-dir", str(tmp_path / "run")]) == 2
    assert without_notes(capsys.readouterr().err).splitlines() == [
        f"error: {reversing_checkpoint}: the teacher translates de->en, not en->de, the "
        f"direction of data.train '{data.train}'; give a teacher of en->de, or data in a "
        "direction it translates"
    ]
    assert not (tmp_path / "run").exists()


def test_several_sources_outputs_over_the_corpus_and_bad_numbers_are_refused(
    reversing_checkpoint, corpus, tmp_path, capsys
):
    config = write_config(tmp_path / "config.yaml", corpus)
    args = ["distill", "--checkpoint", str(reversing_checkpoint), "--config", str(config)]
    args += ["--run-dir", str(tmp_path / "run")]
    mixed = f"data.train=[{{path: {corpus.train}}}, {{path: {corpus.train}, weight: 2}}]"
    assert main([*args, "--set", mixed]) == 2
    assert without_notes(capsys.readouterr().err).strip() == (
        "error: data.train: lists 2 sources; distill one corpus at a time (data.train: its path)"
    )
    assert main([*args, "--out", corpus.train]) == 2
    assert "is the corpus file itself" in capsys.readouterr().err
    for lines in ("0", "1" + "0" * 23):  # islice's bound is 2**63 - 1
        assert main([*args, "--chunk-lines", lines]) == 2
        assert without_notes(capsys.readouterr().err).strip() == (
            f"error: --chunk-lines {lines}: must be in [1, 1000000] (a chunk's lines are held "
            "in memory)"
        )
    assert not (tmp_path / "run").exists()  # no manifest left to refuse a sane rerun
    assert main([*args, "--max-length-ratio", "0.5"]) == 2
    assert without_notes(capsys.readouterr().err).strip() == (
        "error: --max-length-ratio 0.5: must be at least 1 (longer/shorter)"
    )
    assert main([*args, "--no-filter", "--max-source-chrf", "50"]) == 2
    assert "--no-filter: keeps every pair" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("out", ["odir/", "", ".", "a/.."])
def test_an_out_that_names_a_folder_is_refused(reversing_checkpoint, corpus, tmp_path, capsys, out):
    """It wrote the corpus as hidden files (odir/.de, odir/.en, ..de)."""
    config = write_config(tmp_path / "config.yaml", corpus)
    args = ["distill", "--checkpoint", str(reversing_checkpoint), "--config", str(config)]
    assert main([*args, "--run-dir", str(tmp_path / "run"), "--out", out]) == 2
    assert f"error: --out {out!r}: names a folder, not a prefix" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_chunks_folder_that_is_a_file_is_named(reversing_checkpoint, corpus, tmp_path, capsys):
    config = write_config(tmp_path / "config.yaml", corpus)
    run = tmp_path / "run"
    args = ["distill", "--checkpoint", str(reversing_checkpoint), "--config", str(config)]
    assert main([*args, "--run-dir", str(run)]) == 0
    shutil.rmtree(run / "chunks")
    (run / "chunks").write_text("x\n")
    assert main([*args, "--run-dir", str(run)]) == 2
    assert f"{run / 'chunks'}: is a file; distill keeps its chunks in this folder" in (
        capsys.readouterr().err
    )
