"""get_data from the shared mirror: right files, right counts, idempotent; the script too."""

import subprocess
import sys
from pathlib import Path

import pytest

from transformer_mt.data.fetch import FetchError, fetch_corpus

REPO = Path(__file__).resolve().parents[2]
MIRROR = REPO.parent / "shared" / "data"


def line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def test_multi30k_from_mirror_is_idempotent(tmp_path):
    out = tmp_path / "multi30k"
    paths = fetch_corpus("multi30k", out, MIRROR / "multi30k")
    assert len(paths) == 12
    counts = {p.name: line_count(p) for p in paths}
    assert counts["train.de"] == 29000 and counts["valid.cs"] == 1014
    assert counts["test2016.fr"] == 1000
    stamps = {p: p.stat().st_mtime_ns for p in paths}
    fetch_corpus("multi30k", out, MIRROR / "multi30k")
    assert {p: p.stat().st_mtime_ns for p in paths} == stamps


def test_script_copies_enja_mirror(tmp_path):
    out = tmp_path / "enja"
    args = ["small_parallel_enja", "--out", str(out), "--from", str(MIRROR / "small_parallel_enja")]
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "get_data.py"), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert line_count(out / "train.ja") == 50000 and line_count(out / "test.en") == 500


def test_truncated_file_is_repaired_and_bad_mirror_reported(tmp_path):
    out = tmp_path / "multi30k"
    fetch_corpus("multi30k", out, MIRROR / "multi30k")
    (out / "valid.en").write_text("cut short\n")
    fetch_corpus("multi30k", out, MIRROR / "multi30k")
    assert line_count(out / "valid.en") == 1014
    with pytest.raises(FetchError, match="not in the mirror"):
        fetch_corpus("multi30k", tmp_path / "x", tmp_path)
    with pytest.raises(FetchError, match="unknown corpus"):
        fetch_corpus("wmt99", tmp_path / "x")
