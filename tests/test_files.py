"""files.py: outputs appear whole or not at all, and never over their input."""

import pytest

from transformer_mt.errors import TmtError
from transformer_mt.files import atomic_open, atomic_path, refuse_same_file


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
