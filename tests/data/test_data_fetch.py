"""`tmt data` from a mirror: right files, right counts, idempotent, repaired; the checkout's
script (scripts/get_data.py) too.

The shipped Multi30k slice, gzipped as a mirror, stands in for the corpus (the corpus spec is
set to its size); the full mirrors in ../shared/data check the real spec where present.
"""

import dataclasses
import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from tests.corpora import MULTI30K_SLICE, REPO, shared_corpus
from transformer_mt.cli import main
from transformer_mt.data import fetch
from transformer_mt.data.corpus_files import FetchError
from transformer_mt.data.fetch import fetch_corpus

GET_DATA = REPO / "scripts" / "get_data.py"
SLICE_COUNTS = {"train": 300, "valid": 400, "test2016": 100}  # lines of each shipped split


def line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n")


@pytest.fixture
def slice_mirror(tmp_path, monkeypatch) -> Path:
    """The shipped slice laid out as a mirror, with multi30k's spec set to the slice's size."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for split in SLICE_COUNTS:
        for lang in ("de", "en"):
            text = (MULTI30K_SLICE / f"{split}.{lang}").read_bytes()
            (mirror / f"{split}.{lang}.gz").write_bytes(gzip.compress(text))
    spec = fetch.CORPORA["multi30k"]
    spec = dataclasses.replace(spec, langs=("de", "en"), line_counts=SLICE_COUNTS)
    monkeypatch.setitem(fetch.CORPORA, "multi30k", spec)
    return mirror


def fetch_twice(out: Path, mirror: Path) -> dict[str, int]:
    """Fetch `mirror` into `out` twice; the second fetch must leave every file untouched."""
    paths = fetch_corpus("multi30k", out, mirror)
    stamps = {p: p.stat().st_mtime_ns for p in paths}
    fetch_corpus("multi30k", out, mirror)
    assert {p: p.stat().st_mtime_ns for p in paths} == stamps
    return {p.name: line_count(p) for p in paths}


def test_multi30k_from_mirror_is_idempotent(tmp_path, slice_mirror):
    out = tmp_path / "multi30k"
    counts = fetch_twice(out, slice_mirror)
    assert len(counts) == 6
    assert counts["train.de"] == 300 and counts["valid.en"] == 400
    assert counts["test2016.de"] == 100
    assert (out / "train.de").read_bytes() == (MULTI30K_SLICE / "train.de").read_bytes()


def test_full_multi30k_mirror_matches_the_corpus_spec(tmp_path):
    counts = fetch_twice(tmp_path / "multi30k", shared_corpus("multi30k"))
    assert len(counts) == 12
    assert counts["train.de"] == 29000 and counts["valid.cs"] == 1014
    assert counts["test2016.fr"] == 1000


def test_tmt_data_copies_a_mirror(tmp_path, slice_mirror, capsys):
    out = tmp_path / "multi30k"
    assert main(["data", "multi30k", "--out", str(out), "--from", str(slice_mirror)]) == 0
    assert capsys.readouterr().out == f"multi30k: 6 files in {out}\n"
    assert line_count(out / "valid.de") == 400


def test_tmt_data_names_an_output_folder_it_cannot_make(tmp_path, slice_mirror, capsys):
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "multi30k"
    assert main(["data", "multi30k", "--out", str(out), "--from", str(slice_mirror)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"error: {out}: Not a directory"


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_tmt_data_names_a_mirror_that_is_no_folder(tmp_path, capsys, kind):
    mirror = tmp_path / "mirror"
    if kind == "file":
        mirror.write_text("")
    assert main(["data", "multi30k", "--out", str(tmp_path / "out"), "--from", str(mirror)]) == 2
    what = "does not exist" if kind == "missing" else "is not a folder"
    assert capsys.readouterr().err.splitlines() == [
        f"error: {mirror}: {what}; a mirror is a folder of multi30k's files"
    ]


def test_script_refuses_a_mirror_short_of_the_corpus_in_one_line(tmp_path):
    """The script as a process, with the real spec: the slice is not the whole corpus. The
    message names the mirror's file (another corpus's mirror given by mistake, say)."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    text = (MULTI30K_SLICE / "train.en").read_bytes()
    (mirror / "train.en.gz").write_bytes(gzip.compress(text))
    args = ["multi30k", "--out", str(tmp_path / "out"), "--from", str(mirror)]
    done = subprocess.run(
        [sys.executable, str(GET_DATA), *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"error: {mirror / 'train.en.gz'}: 300 lines, expected 29000 for multi30k train.en "
        f"(is {mirror} a mirror of multi30k?)"
    )
    assert not (tmp_path / "out" / "train.en").exists()


def test_script_copies_enja_mirror(tmp_path):
    mirror = shared_corpus("small_parallel_enja")
    out = tmp_path / "enja"
    args = ["small_parallel_enja", "--out", str(out), "--from", str(mirror)]
    done = subprocess.run(
        [sys.executable, str(GET_DATA), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert line_count(out / "train.ja") == 50000 and line_count(out / "test.en") == 500


def test_a_fetched_copy_serves_as_a_mirror(tmp_path, slice_mirror, capsys):
    """`make quickstart DATA_FROM=DIR` says "a local copy": the plain text a fetch wrote is one
    (the .gz file first where a folder holds both)."""
    copy = tmp_path / "copy"
    fetch_corpus("multi30k", copy, slice_mirror)
    out = tmp_path / "again"
    assert main(["data", "multi30k", "--out", str(out), "--from", str(copy)]) == 0
    assert capsys.readouterr().out == f"multi30k: 6 files in {out}\n"
    for path in copy.iterdir():
        assert (out / path.name).read_bytes() == path.read_bytes()
    (copy / "valid.en.gz").write_bytes(gzip.compress(b"gzipped\n"))  # one line, not 400
    with pytest.raises(FetchError, match=r"valid\.en\.gz: 1 lines, expected 400"):
        fetch_corpus("multi30k", tmp_path / "third", copy)


def test_truncated_file_is_repaired_and_bad_mirror_reported(tmp_path, slice_mirror):
    out = tmp_path / "multi30k"
    fetch_corpus("multi30k", out, slice_mirror)
    (out / "valid.en").write_text("cut short\n")
    fetch_corpus("multi30k", out, slice_mirror)
    assert line_count(out / "valid.en") == 400
    assert (out / "valid.en").read_bytes() == (MULTI30K_SLICE / "valid.en").read_bytes()
    with pytest.raises(FetchError, match=r"train\.de\.gz: not in the mirror \(nor train\.de\)"):
        fetch_corpus("multi30k", tmp_path / "x", tmp_path)
    with pytest.raises(FetchError, match="unknown corpus"):
        fetch_corpus("wmt99", tmp_path / "x")
