"""scripts/benchmark.py students: rows of each checkpoint through our translator and
CTranslate2 in float32 and int8, BLEU as sacrebleu scores the translations written, the
table, the plot, and CTranslate2 rows skipped where it cannot search as asked."""

from __future__ import annotations

import argparse
import importlib
import io
import json
from pathlib import Path

import pytest

from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main as tmt_main

from .conftest import WORDS, fit_tiny_checkpoint

REPO = Path(__file__).resolve().parents[1]
SYSTEMS = ["ours", "ours-int8", "ct2", "ct2-int8"]
LINES = [" ".join(WORDS[i : i + 2 + i % 4]) for i in range(0, 12, 2)]  # 6 lines

pytest.importorskip("ctranslate2")
pytest.importorskip("sacrebleu")


@pytest.fixture
def benchmark(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))  # as benchmark.py imports its modules
    return importlib.import_module("benchmark")


@pytest.fixture
def bench_students(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    return importlib.import_module("bench_students")


@pytest.fixture(scope="module")
def copying_checkpoint(checkpoint, tmp_path_factory):
    """The tiny model after 60 full-batch Adam steps on copying word sequences: hypotheses that
    end in EOS at different lengths and a BLEU above 0 against the sources."""
    tokenizer = load_for_inference(checkpoint).src_tokenizer
    texts = [" ".join(WORDS[i : i + 3 + i % 3]) for i in range(len(WORDS))]
    pairs = [(tokenizer.encode(t), tokenizer.encode(t)) for t in texts]
    out = tmp_path_factory.mktemp("copying") / "model.pt"
    return fit_tiny_checkpoint(checkpoint, pairs, 3e-2, 60, out)


@pytest.fixture
def data(tmp_path):
    """test2016.de and .en: the references are the sources (the copy task)."""
    for lang in ("de", "en"):
        (tmp_path / f"test2016.{lang}").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return tmp_path


def run_benchmark(benchmark, capsys, *argv):
    benchmark.main(["--table", "students", *argv])
    lines = capsys.readouterr().out.splitlines()
    json_lines = [line for line in lines if line.startswith("{")]
    rows = [json.loads(line) for line in json_lines[1:]]  # after the machine line
    return rows, lines[len(json_lines) :]


def test_rows_scores_table_and_plot(
    benchmark, capsys, copying_checkpoint, checkpoint, data, tmp_path
):
    import sacrebleu

    outputs, png = tmp_path / "out", tmp_path / "plots" / "students.png"
    rows, table = run_benchmark(
        benchmark,
        capsys,
        "--checkpoints", f"copy={copying_checkpoint}", f"random={checkpoint}@1",
        "--data", str(data), "--limit", "5", "--batch-size", "2", "--repeats", "1",
        "--outputs", str(outputs), "--plot", str(png),
    )  # fmt: skip
    assert [(r["name"], r["system"]) for r in rows] == [
        (name, system) for name in ("copy", "random") for system in SYSTEMS
    ]
    references = LINES[:5]
    for r in rows:
        assert "skipped" not in r and r["sentences"] == 5 and r["batch_size"] == 2
        hypotheses = (outputs / f"{r['name']}.{r['system']}.en").read_text().splitlines()
        assert len(hypotheses) == 5
        assert r["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
        assert r["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2)
        assert r["length_norm"] == "average"
        assert r["beam_size"] == (5 if r["name"] == "copy" else 1)  # the config's, or @1
    copy = {r["system"]: r for r in rows if r["name"] == "copy"}
    assert copy["ours"]["bleu"] > 0 and copy["ours"]["parameters"] > 0
    assert all(r["speed_vs_first"] == 1.0 for r in copy.values())
    # Equal settings: CTranslate2 float32 writes our float32 translations.
    assert (outputs / "copy.ours.en").read_text() == (outputs / "copy.ct2.en").read_text()
    assert table[1].startswith("| model | system | parameters | beam | BLEU | chrF | sentences/s |")
    assert table[1].endswith("| vs copy |")
    body = [line for line in table if line.startswith("| ")][1:]
    assert len(body) == 8
    params = f"{copy['ours']['parameters'] / 1e6:.2f}M"
    assert body[0].startswith(f"| copy | ours float32 | {params} | 5 |")
    assert body[0].endswith(f"| {copy['ours']['bleu']} | {copy['ours']['chrf']} | "
                            f"{copy['ours']['sent_per_s']} | 1.00x |")  # fmt: skip
    assert body[6].startswith("| random | CTranslate2 float32 |") and "| 1 |" in body[6]
    assert table[-1].startswith("test2016, 5 sentences, batches of 2, beam as configured")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_checkpoint_settings_skip_ctranslate2_with_a_note(
    bench_students, copying_checkpoint, data, tmp_path
):
    """The tiny checkpoint's decode section is the default: GNMT length penalty, which
    CTranslate2 cannot search with; our rows are what `tmt translate` writes."""
    bench = bench_students
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(
        ["--checkpoints", f"copy={copying_checkpoint}", "--data", str(data), "--limit", "3"]
        + ["--systems", "ours", "ct2", "--length-norm", "checkpoint", "--repeats", "1"]
        + ["--outputs", str(tmp_path / "out")]
    )
    rows = bench.run(args)
    assert [r["system"] for r in rows] == ["ours", "ct2"]
    assert "skipped" not in rows[0] and rows[0]["length_norm"] == "gnmt"
    assert rows[1]["skipped"].startswith("length_norm gnmt (penalty 1): CTranslate2 divides")
    source = tmp_path / "in.de"
    source.write_text("\n".join(LINES[:3]) + "\n", encoding="utf-8")
    written = tmp_path / "tmt.en"
    argv = ["translate", "--checkpoint", str(copying_checkpoint), "--no-split"]
    assert tmt_main([*argv, "--input", str(source), "--output", str(written)]) == 0
    assert (tmp_path / "out" / "copy.ours.en").read_text() == written.read_text()
    table = io.StringIO()
    bench.print_table(rows, file=table)
    lines = table.getvalue().splitlines()
    assert len([line for line in lines if line.startswith("| copy |")]) == 1
    assert lines[3].startswith("skipped: copy, CTranslate2 float32: length_norm gnmt")
    assert "the checkpoint's length norm, max length 1.5|x|+10" in lines[4]


def test_a_shortlist_applies_to_every_system_of_its_checkpoint(
    bench_students, copying_checkpoint, data, tmp_path
):
    """Each source piece lists itself (the copy task's translation): ours and CTranslate2
    (use_vmap) search the same restricted vocabulary and write the same translations, batches
    of one sentence (CTranslate2 keeps one set per batch, ours one per sentence)."""
    from transformer_mt.shortlist.vmap import write_vmap

    tokenizer = load_for_inference(copying_checkpoint).src_tokenizer
    pieces = [tokenizer.id_to_piece(i) for i in range(4, tokenizer.vocab_size)]
    vmap = tmp_path / "identity.vmap"
    write_vmap(vmap, [], {piece: [piece] for piece in pieces})
    parser = argparse.ArgumentParser()
    bench_students.add_arguments(parser)
    for lang in ("de", "en"):  # --split: another file prefix of --data
        (data / f"test2016.{lang}").rename(data / f"valid.{lang}")
    argv = ["--checkpoints", f"copy={copying_checkpoint}@2", "--data", str(data)]
    argv += ["--split", "valid"]
    argv += ["--systems", "ours", "ct2", "--repeats", "1", "--batch-size", "1"]
    argv += ["--outputs", str(tmp_path / "out")]
    rows = bench_students.run(parser.parse_args([*argv, "--shortlists", f"copy={vmap}"]))
    assert [(r["shortlist"], r["split"]) for r in rows] == [(str(vmap), "valid")] * 2
    ours, ct2 = ((tmp_path / "out" / f"copy.{s}.en").read_text() for s in ("ours", "ct2"))
    assert ours == ct2 and len(ours.splitlines()) == len(LINES)
    with pytest.raises(SystemExit, match="--shortlists 'other=x': give NAME=VMAP"):
        bench_students.run(parser.parse_args([*argv, "--shortlists", "other=x"]))
