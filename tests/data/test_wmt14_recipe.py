"""The WMT14 recipe without the network: `tmt data wmt14` against an in-memory hub dataset,
the stand-in corpus made from the shipped Multi30k slice, and the WMT14 config run end to end
(`run_experiment.py`: train through the streaming path, average, translate and score test) on
that stand-in with a tiny model."""

import dataclasses
import json
import runpy
import sys

import datasets
import pytest

from tests.corpora import MULTI30K_SLICE, REPO, slice_lines
from transformer_mt import progress
from transformer_mt.artifacts import load_checkpoint
from transformer_mt.cli import main
from transformer_mt.config import load_config
from transformer_mt.data import hub_export
from transformer_mt.data.corpus_files import FetchError
from transformer_mt.data.fetch import fetch_corpus
from transformer_mt.data.standin import make_standin

CONFIG = REPO / "configs" / "transformer_base_wmt14_en_de.yaml"
HUB_ROWS = {"train": 300, "validation": 5, "test": 7}  # a small wmt14/de-en


def script_main(name: str):
    """The `main` of scripts/{name}.py, loaded as the script runs it."""
    return runpy.run_path(str(REPO / "scripts" / f"{name}.py"), run_name=name)["main"]


def get_data(*args: str) -> int:
    """`tmt data ARGS`, in this process."""
    return main(["data", *args])


def lines(path) -> list[str]:
    return path.read_text("utf-8").split("\n")[:-1]


@pytest.fixture
def fake_hub(monkeypatch) -> list[tuple]:
    """`datasets.load_dataset` serving a small wmt14/de-en from memory, as streamed splits;
    wmt14's spec is set to its size. Returns the calls made."""
    calls = []

    def load_dataset(name, config, split, streaming):
        calls.append((name, config, split, streaming))
        rows = [{"en": f"{split} {i}", "de": f"{split} Satz {i}"} for i in range(HUB_ROWS[split])]
        rows[1]["en"] = "a sentence\nbroken in two"
        return datasets.Dataset.from_dict({"translation": rows}).to_iterable_dataset()

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # no connectivity probe
    spec = hub_export.HUB_CORPORA["wmt14"]
    counts = {ours: HUB_ROWS[hub] for ours, hub in spec.hub_splits.items()}
    spec = dataclasses.replace(spec, line_counts=counts)
    monkeypatch.setitem(hub_export.HUB_CORPORA, "wmt14", spec)
    return calls


def test_wmt14_streams_from_the_hub_into_text_files_and_resumes(
    tmp_path, fake_hub, capsys, monkeypatch
):
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)  # a line per pair
    out = tmp_path / "wmt14"
    paths = fetch_corpus("wmt14", out)
    err = capsys.readouterr().err  # stderr is no terminal here: plain lines, like a log
    done = "hub dataset wmt14/de-en split train: read 300/300 pairs (100%), "
    assert "\r" not in err and done in err
    names = [f"{split}.{lang}" for split in ("train", "valid", "test") for lang in ("en", "de")]
    assert [p.name for p in paths] == names
    assert sorted({call[2] for call in fake_hub}) == sorted(HUB_ROWS)
    assert {call[:2] + call[3:] for call in fake_hub} == {("wmt14", "de-en", True)}
    assert lines(out / "test.de") == [f"test Satz {i}" for i in range(7)]  # in the hub's order
    assert lines(out / "valid.en")[:2] == ["validation 0", "a sentence broken in two"]
    hub_en = [f"train {i}" for i in range(300)]
    hub_en[1] = "a sentence broken in two"
    hub = list(zip(hub_en, [f"train Satz {i}" for i in range(300)], strict=True))
    train = list(zip(lines(out / "train.en"), lines(out / "train.de"), strict=True))
    assert sorted(train) == sorted(hub) and train != hub  # every pair, aligned, shuffled
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left

    stamps = {p: p.stat().st_mtime_ns for p in paths}
    (out / "valid.de").write_text("cut short\n")
    fetch_corpus("wmt14", out)
    assert lines(out / "valid.de")[0] == "validation Satz 0"
    assert all(p.stat().st_mtime_ns == stamps[p] for p in paths if p.name[:5] != "valid")


def test_wmt14_short_of_the_hubs_size_writes_nothing(tmp_path, fake_hub, monkeypatch):
    spec = dataclasses.replace(hub_export.HUB_CORPORA["wmt14"], line_counts={"train": 301})
    monkeypatch.setitem(hub_export.HUB_CORPORA, "wmt14", spec)
    message = "hub dataset wmt14/de-en split train: 300 pairs, expected 301"
    with pytest.raises(FetchError, match=message):
        fetch_corpus("wmt14", tmp_path / "wmt14")
    assert list((tmp_path / "wmt14").iterdir()) == []
    with pytest.raises(FetchError, match="wmt14: comes from the datasets hub"):
        fetch_corpus("wmt14", tmp_path / "wmt14", mirror=tmp_path)


def test_standin_repeats_multi30k_shuffled_in_wmt14s_layout(tmp_path, capsys):
    out = tmp_path / "standin"
    args = ["--pairs", "700", "--from", str(MULTI30K_SLICE), "--out", str(out)]
    assert get_data("wmt14_standin", *args) == 0
    assert capsys.readouterr().out == f"wmt14_standin: 6 files in {out}\n"
    pairs = list(zip(slice_lines("train", "en"), slice_lines("train", "de"), strict=True))
    train = list(zip(lines(out / "train.en"), lines(out / "train.de"), strict=True))
    assert len(train) == 700 and set(train) <= set(pairs)
    assert sorted(train[:300]) == sorted(train[300:600]) == sorted(pairs)  # each pass whole
    assert train[:300] != train[300:600] != pairs  # ... in an order of its own
    assert lines(out / "valid.de") == slice_lines("valid", "de")
    assert lines(out / "test.en") == slice_lines("test2016", "en")

    stamps = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    assert make_standin(out, 700, [MULTI30K_SLICE])
    assert {p: p.stat().st_mtime_ns for p in out.iterdir()} == stamps


def test_a_standin_into_its_own_multi30k_folder_is_refused(tmp_path, capsys):
    source = tmp_path / "multi30k"
    source.mkdir()
    for split in ("train", "valid", "test2016"):
        for lang in ("en", "de"):
            (source / f"{split}.{lang}").write_text("".join(slice_lines(split, lang)[:5]))
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    args = ["--pairs", "3", "--from", str(source), "--out", str(tmp_path / "." / "multi30k")]
    assert get_data("wmt14_standin", *args) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {source}: the stand-in would write over the Multi30k files it is "
        "made from; give it a folder of its own"
    )
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before


def test_standin_without_multi30k_is_one_line(tmp_path, capsys):
    assert get_data("wmt14_standin", "--from", str(tmp_path), "--out", str(tmp_path / "x")) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("error: wmt14_standin: no Multi30k en-de (train.en, ")
    assert err.endswith(f" in {tmp_path}; fetch multi30k first")
    with pytest.raises(SystemExit):
        get_data("multi30k", "--pairs", "10")


def test_the_wmt14_config_streams_its_local_files():
    data = load_config(CONFIG).data
    assert (data.format, data.train, data.test, data.streaming) == (
        "text", "data/wmt14/train", "data/wmt14/test", True
    )  # fmt: skip


def test_the_wmt14_recipe_runs_end_to_end_on_the_standin(tmp_path, monkeypatch, capsys):
    """`run_experiment.py` with the WMT14 config, on a 2,000-pair stand-in, with a tiny model
    and a few updates: trained through the streaming path, averaged, test scored."""
    standin, run = tmp_path / "standin", tmp_path / "run"
    make_standin(standin, 2000, [MULTI30K_SLICE])
    overrides = [f"data.{split}={standin}/{split}" for split in ("train", "valid", "test")] + [
        f"data.cache_dir={tmp_path}/cache", "data.shuffle_buffer=500",
        "model.d_model=32", "model.n_heads=2", "model.n_layers=1", "model.d_ff=64",
        "tokenizer.vocab_size=200", "tokenizer.input_sentence_size=1000",
        "train.max_steps=4", "train.update_freq=1", "train.warmup_steps=2",
        "train.valid_every=2", "train.valid_max_sentences=10", "train.max_tokens=512",
        "train.precision=fp32", "train.threads=1", "decode.max_len_b=5",
    ]  # fmt: skip
    argv = ["run_experiment.py", "--config", str(CONFIG), "--run-dir", str(run)]
    monkeypatch.setattr(sys, "argv", [*argv, "--set", *overrides])
    assert script_main("run_experiment")() == 0

    position = load_checkpoint(run / "checkpoints" / "last.pt").training.data_position
    assert "chunk" in position  # the streaming reader's position: chunk within epoch
    signature = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"
    assert capsys.readouterr().out.startswith(f"BLEU|{signature}")
    results = json.loads((run / "results.json").read_text("utf-8"))
    assert results["test"] == f"{standin}/test" and results["direction"] == "en-de"
    assert len(lines(run / "test.hyp")) == 100
