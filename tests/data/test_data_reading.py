"""Corpus readers: same columns from every format; each bad input is a one-line DataError."""

import dataclasses
import gzip
import json
import os
import socket

import numpy as np
import pytest

from transformer_mt.config import DataConfig
from transformer_mt.data import dataset, hub
from transformer_mt.data.cleaning import select_training_pairs
from transformer_mt.data.dataset import load_split
from transformer_mt.data.locations import check_sources
from transformer_mt.data.readers import DataError, read_jsonl, read_text_pair, read_tsv
from transformer_mt.errors import TmtError

PAIRS = [("Ein Hund läuft.", "A dog runs."), ("Zwei Männer.", "Two men.")]


def write_text_pair(tmp_path, name="train", pairs=PAIRS):
    (tmp_path / f"{name}.de").write_text("".join(s + "\n" for s, _ in pairs), "utf-8")
    (tmp_path / f"{name}.en").write_text("".join(t + "\n" for _, t in pairs), "utf-8")
    return tmp_path / f"{name}.de", tmp_path / f"{name}.en"


def one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert isinstance(excinfo.value, TmtError)
    assert "\n" not in message
    return message


def test_formats_give_the_same_columns(tmp_path):
    write_text_pair(tmp_path)
    (tmp_path / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), "utf-8")
    rows = [json.dumps({"translation": {"de": s, "en": t}}) for s, t in PAIRS]
    (tmp_path / "train.jsonl").write_text("\n".join(rows) + "\n", "utf-8")
    expected = {"src": [s for s, _ in PAIRS], "tgt": [t for _, t in PAIRS]}
    for fmt, train in [
        ("text", tmp_path / "train"),
        ("tsv", tmp_path / "train.tsv"),
        ("jsonl", tmp_path / "train.jsonl"),
    ]:
        corpus = load_split(DataConfig(format=fmt, train=str(train)), "train")
        assert corpus.to_dict() == expected, fmt


def test_gzip_mirror_is_read_directly(tmp_path):
    (tmp_path / "valid.de.gz").write_bytes(gzip.compress(b"Hallo\nWelt\n"))
    (tmp_path / "valid.en.gz").write_bytes(gzip.compress(b"Hello\nworld\n"))
    corpus = load_split(DataConfig(valid=str(tmp_path / "valid")), "valid")
    assert corpus["tgt"] == ["Hello", "world"]


def test_unequal_line_counts_name_both_files(tmp_path):
    src, tgt = write_text_pair(tmp_path)
    tgt.write_text("only one\n", "utf-8")
    with pytest.raises(DataError) as info:
        read_text_pair(src, tgt)
    message = one_line_error(info)
    assert f"{src} has 2 lines" in message and f"{tgt} has 1" in message


def test_a_line_count_that_differs_by_blank_lines_says_so(tmp_path):
    src, tgt = write_text_pair(tmp_path)
    tgt.write_text(tgt.read_text("utf-8") + "\n", "utf-8")
    with pytest.raises(DataError) as info:
        read_text_pair(src, tgt)
    assert one_line_error(info).endswith(f"({tgt} ends in 1 blank line(s) the other lacks)")


def test_a_blank_tsv_line_is_an_empty_pair_as_in_text_files(tmp_path):
    """A trailing blank line had stopped training: `x.tsv:3: expected 2 tab-separated fields,
    found 1`. As an empty pair it is dropped from training, and pair numbers stay lines."""
    tsv = tmp_path / "x.tsv"
    tsv.write_text("a\tb\n\n  \nc\td\n\n", "utf-8")
    pairs = [("a", "b"), ("", ""), ("", ""), ("c", "d"), ("", "")]
    assert read_tsv(tsv)[:] == {"src": [s for s, _ in pairs], "tgt": [t for _, t in pairs]}
    cfg = DataConfig(format="tsv", train=str(tsv), src_lang="de", tgt_lang="en")
    assert [pair[:2] for pair in dataset.stream_pairs(cfg, "train")] == pairs


def test_a_tsv_quoted_by_a_csv_writer_gets_a_warning(tmp_path, caplog):
    """pandas' `to_csv(sep="\t")` quotes a field holding a quote and doubles the quotes in
    it: read as it stands, the model would learn them."""
    tsv = tmp_path / "x.tsv"
    tsv.write_text('a\tb\n"Er sagt ""Hallo"""\t"He says ""Hello"""\n"x"\t"y"\n', "utf-8")
    with caplog.at_level("WARNING"):
        assert read_tsv(tsv)["src"][1] == '"Er sagt ""Hallo"""'
        read_tsv(tsv)  # read again, as a training run reads its corpus: no second warning
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"{tsv}:2: a field in quotes with doubled quotes inside")
    caplog.clear()
    other = tmp_path / "y.tsv"
    other.write_text('"x"\t"y"\nshe said "" twice\tb\n', "utf-8")
    read_tsv(other)
    assert not caplog.records


def test_missing_file(tmp_path):
    src, _ = write_text_pair(tmp_path)
    with pytest.raises(DataError) as info:
        read_text_pair(src, tmp_path / "nowhere.en")
    assert "nowhere.en: file not found" in one_line_error(info)


def test_empty_file(tmp_path):
    src, tgt = write_text_pair(tmp_path)
    tgt.write_text("", "utf-8")
    with pytest.raises(DataError) as info:
        read_text_pair(src, tgt)
    assert f"{tgt}: file is empty" in one_line_error(info)


def test_bad_utf8_names_file_and_line(tmp_path):
    src, tgt = write_text_pair(tmp_path)
    src.write_bytes(b"Ein Hund.\nZwei M" + b"\xe4nner.\n")
    with pytest.raises(DataError) as info:
        read_text_pair(src, tgt)
    assert f"{src}:2: not valid UTF-8" in one_line_error(info)


def test_malformed_tsv_and_jsonl_lines(tmp_path):
    tsv = tmp_path / "x.tsv"
    tsv.write_text("a\tb\nno tab here\n", "utf-8")
    with pytest.raises(DataError) as info:
        read_tsv(tsv)
    assert f"{tsv}:2: expected 2 tab-separated fields" in one_line_error(info)
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text('{"translation": {"de": "a", "en": "b"}}\n{"translation": {"de": "c"}}\n')
    with pytest.raises(DataError) as info:
        read_jsonl(jsonl, "de", "en")
    assert f"{jsonl}:2:" in one_line_error(info)
    jsonl.write_text("{not json\n")
    with pytest.raises(DataError) as info:
        read_jsonl(jsonl, "de", "en")
    assert f"{jsonl}:1: not valid JSON" in one_line_error(info)
    jsonl.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DataError) as info:
        read_jsonl(jsonl, "de", "en")
    assert f"{jsonl}:1: not valid JSON (nested too deeply)" in one_line_error(info)


@pytest.mark.parametrize(
    "row, problem",
    [
        ('{"translation": {"de": "c"}}', "translation.en is missing"),
        ('{"translation": {"de": 5, "en": "b"}}', "translation.de is a number, not a string"),
        ('{"translation": {"de": "a", "en": null}}', "translation.en is null, not a string"),
        ('{"translation": ["a", "b"]}', "translation is a list, not an object"),
        ('{"de": "a", "en": "b"}', "it has no translation"),
        ('["a", "b"]', "the line is a list, not an object"),
        ("17", "the line is a number, not an object"),
    ],
)
def test_a_jsonl_line_of_another_shape_says_what_it_holds(tmp_path, row, problem):
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text(f'{{"translation": {{"de": "a", "en": "b"}}}}\n{row}\n', "utf-8")
    with pytest.raises(DataError) as info:
        read_jsonl(jsonl, "de", "en")
    assert one_line_error(info) == (
        f'{jsonl}:2: expected {{"translation": {{"de": ..., "en": ...}}}} ({problem})'
    )


def test_hub_fails_fast_offline(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "create_connection", refuse)
    cfg = DataConfig(format="hub", hub_name="wmt14", hub_config="de-en", train="train")
    with pytest.raises(DataError) as info:
        load_split(cfg, "train")
    assert "wmt14" in one_line_error(info) and "offline" in str(info.value)


def test_hub_probe_has_a_short_timeout():
    assert hub.HUB_PROBE_TIMEOUT_S <= 5


def test_filter_counts_on_fixture():
    #                 ok  empty  long  ratio  ok  empty(both)  ratio-ok-edge
    src = np.array([5, 0, 12, 2, 3, 0, 3])
    tgt = np.array([6, 4, 3, 9, 3, 0, 9])
    keep, report = select_training_pairs(src, tgt, max_len=10, max_len_ratio=3.0)
    assert keep.tolist() == [0, 4, 6]
    assert (report.total, report.kept, report.empty, report.too_long, report.bad_ratio) == (
        7,
        3,
        2,
        1,
        1,
    )
    assert "dropped 2 empty" in str(report)


def test_check_sources_names_every_faulty_file_at_once(tmp_path):
    write_text_pair(tmp_path, "train")
    (tmp_path / "valid.de.gz").write_bytes(gzip.compress(b"Ein Hund.\n"))
    (tmp_path / "valid.en").write_text("", "utf-8")
    (tmp_path / "test.de").mkdir()
    cfg = DataConfig(
        train=str(tmp_path / "train"), valid=str(tmp_path / "valid"), test=str(tmp_path / "test")
    )
    with pytest.raises(DataError) as err:
        check_sources(cfg)
    message = one_line_error(err)
    assert message == (
        f"data.valid={str(tmp_path / 'valid')!r}: {tmp_path}/valid.en is empty; "
        f"data.test={str(tmp_path / 'test')!r}: {tmp_path}/test.de is a folder, not a file, "
        f"{tmp_path}/test.en not found; fix these paths in the config "
        "(data.test: null when there is no test set)"
    )
    (tmp_path / "valid.en").write_text("A dog.\n", "utf-8")
    check_sources(dataclasses.replace(cfg, test=None))  # valid.de found as valid.de.gz
    # blank lines only: said so before any work (it had been "file is empty" after encoding)
    (tmp_path / "valid.en").write_text("\n \n\t\n", "utf-8")
    with pytest.raises(DataError, match=r"valid\.en holds only blank lines; fix these paths"):
        check_sources(dataclasses.replace(cfg, test=None))


def test_check_sources_single_file_formats_and_hub(tmp_path):
    (tmp_path / "train.tsv").write_text("a\tb\n", "utf-8")
    for fmt in ("tsv", "jsonl"):
        cfg = DataConfig(
            format=fmt, train=str(tmp_path / "train.tsv"), valid=str(tmp_path / "dev"), test=None
        )
        with pytest.raises(DataError) as err:
            check_sources(cfg)
        assert one_line_error(err).startswith(f"data.valid={str(tmp_path / 'dev')!r}: ")
        assert "train.tsv" not in str(err.value) and "data.test" not in str(err.value)
    check_sources(DataConfig(format="hub", hub_name="wmt14", train="train", valid="validation"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_check_sources_refuses_a_named_pipe(tmp_path):
    """Training reads its corpus several times; a pipe gives it once, or blocks."""
    write_text_pair(tmp_path, "train")
    (tmp_path / "train.en").unlink()
    os.mkfifo(tmp_path / "train.en")
    with pytest.raises(DataError) as err:
        check_sources(DataConfig(train=str(tmp_path / "train"), valid=None, test=None))
    assert f"{tmp_path}/train.en is a named pipe (FIFO), not a regular file" in one_line_error(err)


def test_check_sources_names_a_symlink_loop(tmp_path):
    write_text_pair(tmp_path, "train")
    (tmp_path / "train.en").unlink()
    (tmp_path / "loop").symlink_to(tmp_path / "train.en")
    (tmp_path / "train.en").symlink_to(tmp_path / "loop")
    with pytest.raises(DataError) as err:
        check_sources(DataConfig(train=str(tmp_path / "train"), valid=None, test=None))
    assert f"{tmp_path}/train.en is a symlink loop; fix these paths" in one_line_error(err)


def test_a_jsonl_text_escaping_a_lone_surrogate_names_its_line(tmp_path):
    """`"\\ud800"` is valid JSON but no character: UTF-8 cannot hold it, and Arrow (in memory)
    or the tokenizer (streamed) had stopped with a UnicodeEncodeError traceback."""
    jsonl = tmp_path / "x.jsonl"
    good = '{"translation": {"de": "a", "en": "b"}}\n'
    jsonl.write_text(good + '{"translation": {"de": "der \\ud800 haus", "en": "x"}}\n', "utf-8")
    expected = f"{jsonl}:2: translation.de holds \\ud800, half of a UTF-16 surrogate pair"
    cfg = DataConfig(format="jsonl", train=str(jsonl))
    with pytest.raises(DataError) as info:
        load_split(cfg, "train")
    assert one_line_error(info).startswith(expected)
    with pytest.raises(DataError) as info:
        list(dataset.stream_pairs(dataclasses.replace(cfg, streaming=True), "train"))
    assert one_line_error(info).startswith(expected)


@pytest.mark.parametrize(
    ("row", "key"),
    [
        ('{"translation": {"de": "x", "en": "y"}, "translation": {"de": "a"}}', "translation"),
        ('{"translation": {"de": "x", "en": "y", "de": "a"}}', "de"),
    ],
)
def test_a_jsonl_line_holding_a_key_twice_names_it(tmp_path, row, key):
    """`json` keeps a repeated key's last value: a second, partial "translation" had been
    blamed for a language the line holds ("translation.en is missing")."""
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text('{"translation": {"de": "a", "en": "b"}}\n' + row + "\n", "utf-8")
    expected = f"{jsonl}:2: key {key!r} appears twice in one object"
    cfg = DataConfig(format="jsonl", train=str(jsonl))
    with pytest.raises(DataError) as info:
        load_split(cfg, "train")
    assert one_line_error(info) == expected
    with pytest.raises(DataError) as info:
        list(dataset.stream_pairs(dataclasses.replace(cfg, streaming=True), "train"))
    assert one_line_error(info) == expected


@pytest.fixture
def local_hub(tmp_path, monkeypatch):
    """A local `datasets` folder of hub rows, its last row's de null; no network, no
    HF_*_OFFLINE, and the datasets cache under tmp_path."""
    import datasets

    def refuse(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))
    folder = tmp_path / "hubdir"
    folder.mkdir()
    rows = [{"translation": {"de": s, "en": t}} for s, t in PAIRS]
    rows.append({"translation": {"de": None, "en": "x"}})
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "validation.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows[:2]))
    return DataConfig(format="hub", hub_name=str(folder), train="train", valid="validation")


def test_a_local_hub_folder_needs_no_network(local_hub):
    """Not refused as "this machine looks offline": `datasets` reads a local folder itself."""
    corpus = load_split(local_hub, "valid")
    assert list(zip(corpus["src"], corpus["tgt"], strict=True)) == PAIRS[:2]
    streamed = dataset.stream_pairs(dataclasses.replace(local_hub, streaming=True), "valid")
    assert [(s, t) for s, t, _ in streamed] == PAIRS[:2]


@pytest.mark.parametrize(
    "read", [load_split, lambda cfg, split: list(dataset.stream_pairs(cfg, split))]
)
def test_a_hub_row_without_a_language_or_its_text_is_named(local_hub, read):
    """A language the rows lack had been a KeyError traceback, a null text an AttributeError."""
    where = f"hub dataset {local_hub.hub_name} split train, row"
    expected = '{where} {row} (from 0): expected {{"translation": {{"{lang}": ..., "en": ...}}}} '
    with pytest.raises(DataError) as info:
        read(dataclasses.replace(local_hub, src_lang="fr"), "train")
    assert one_line_error(info) == (
        expected.format(where=where, row=0, lang="fr") + "(translation.fr is missing)"
    )
    with pytest.raises(DataError) as info:
        read(local_hub, "train")
    assert one_line_error(info) == (
        expected.format(where=where, row=len(PAIRS), lang="de")
        + "(translation.de is null, not a string)"
    )
