"""`tmt translate --quiet`: the same output, and on stderr nothing but errors, warnings about
the input and the scores asked for with --ref."""

from __future__ import annotations

import pytest

from transformer_mt.cli import main

LINES = ["ein mann fährt rad", "", "zwei hunde spielen im schnee"]


@pytest.fixture(autouse=True)
def _busy_machine(monkeypatch):
    """As on a machine where another process holds a core: the threads note is due."""
    from transformer_mt import machine

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(machine, "busy_cores", lambda cores, seconds: cores[1:])
    monkeypatch.setattr(machine, "allowed_cores", lambda: [0, 1])


def run(checkpoint, tmp_path, capsys, *args: str) -> tuple[bytes, str]:
    source, out = tmp_path / "in.txt", tmp_path / f"out{len(args)}.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    base = ["translate", "--checkpoint", str(checkpoint), "--beam-size", "1"]
    assert main([*base, "--input", str(source), "--output", str(out), *args]) == 0
    return out.read_bytes(), capsys.readouterr().err


def test_quiet_writes_the_same_translations_and_says_nothing_else(checkpoint, tmp_path, capsys):
    loud, said = run(checkpoint, tmp_path, capsys, "--progress")
    assert "translated 3 line(s)" in said and "note:" in said
    quiet, nothing = run(checkpoint, tmp_path, capsys, "--progress", "--quiet")
    assert quiet == loud and nothing == ""


def test_quiet_keeps_the_scores_asked_for(checkpoint, tmp_path, capsys):
    ref = tmp_path / "ref.txt"
    ref.write_text("a man rides\n\ntwo dogs play\n", encoding="utf-8")
    _, said = run(checkpoint, tmp_path, capsys, "--quiet", "--ref", str(ref))
    lines = said.splitlines()
    assert len(lines) == 2 and lines[0].startswith("BLEU") and lines[1].startswith("chrF")


def test_quiet_documents_say_nothing(checkpoint, tmp_path, capsys):
    page = tmp_path / "page.html"
    page.write_text("<p>ein mann fährt rad</p>\n", encoding="utf-8")
    out = tmp_path / "out.html"
    base = ["translate", "--checkpoint", str(checkpoint), "--format", "html"]
    assert main([*base, "--input", str(page), "--output", str(out), "--quiet"]) == 0
    assert capsys.readouterr().err == "" and out.read_text(encoding="utf-8").startswith("<p>")
