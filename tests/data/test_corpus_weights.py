"""Several training corpora mixed by weight (`data.train` as a list of sources): the mix's
proportions and epoch end, one order for the streamed and in-memory paths, the config keys."""

import dataclasses
import itertools
import json
from collections import Counter
from functools import partial

import pytest

from tests.corpora import slice_lines
from tests.data.streams import cursor, data_config, numbers, read_epoch
from transformer_mt.config import (
    ConfigError,
    DataConfig,
    TrainSource,
    config_to_dict,
    dump_config,
    load_config,
)
from transformer_mt.data.dataset import load_split, stream_pairs
from transformer_mt.data.encoding import corpus_key
from transformer_mt.data.locations import check_sources, describe_split
from transformer_mt.data.mixing import IN_MEMORY_REPEATS, MixError, interleave
from transformer_mt.data.pipeline import encode_splits
from transformer_mt.data.readers import DataError


def write_corpus(directory, name, fmt, pairs) -> str:
    """`pairs` as corpus `name` in format `fmt` under `directory`; its data.train location."""
    prefix = directory / name
    if fmt == "text":
        for side, lang in enumerate(("de", "en")):
            (directory / f"{name}.{lang}").write_text("".join(f"{p[side]}\n" for p in pairs))
        return str(prefix)
    path = directory / f"{name}.{fmt}"
    if fmt == "tsv":
        path.write_text("".join(f"{src}\t{tgt}\n" for src, tgt in pairs))
    else:
        rows = ({"translation": {"de": src, "en": tgt}} for src, tgt in pairs)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def numbered(name: str, n: int) -> list[tuple[str, str]]:
    return [(f"{name} {i}", f"{name.upper()} {i}") for i in range(n)]


def mixed_config(directory, sizes_and_weights, fmt="text", **changes) -> DataConfig:
    """Sources a, b, c, ... of numbered pairs, of the given sizes and weights."""
    sources = tuple(
        TrainSource(write_corpus(directory, name, fmt, numbered(name, n)), weight)
        for name, (n, weight) in zip("abcdef", sizes_and_weights, strict=False)
    )
    return DataConfig(format=fmt, train=sources, **changes)


def source_of(pair: tuple[str, str]) -> str:
    return pair[0].split()[0]


def tagged(k: int, n: int) -> list[tuple[int, int]]:
    """Source k of n items, each tagged with k."""
    return [(k, i) for i in range(n)]


def test_a_long_mix_follows_the_weights():
    sizes, weights = [5000, 40, 300], [3.0, 1.0, 2.0]
    rows = [partial(tagged, k, n) for k, n in enumerate(sizes)]
    counts = Counter(k for k, _ in interleave(rows, weights))
    total = sum(counts.values())
    assert total > 9000  # the large source sets the epoch: about 5000 * 6 / 3 draws
    for k, weight in enumerate(weights):
        assert counts[k] / total == pytest.approx(weight / sum(weights), abs=0.02), k


def test_an_epoch_reads_every_source_to_its_end_and_stops_at_the_last(tmp_path):
    sizes = {"a": 30, "b": 200, "c": 5}
    cfg = mixed_config(tmp_path, [(30, 1.0), (200, 1.0), (5, 2.0)])
    pairs = [(src, tgt) for src, tgt, _ in stream_pairs(cfg, "train")]
    for name, n in sizes.items():
        mine = [p for p in pairs if source_of(p) == name]
        assert len(mine) >= n
        # a source runs in file order, starting again from its first pair when it runs out
        assert mine == [numbered(name, n)[i % n] for i in range(len(mine))]
    assert Counter(map(source_of, pairs))["b"] == 200  # the last to finish is read once
    assert pairs[-1] == numbered("b", 200)[-1]  # and the epoch ends with its last pair


def test_the_mix_is_the_same_at_every_read(tmp_path):
    cfg = mixed_config(tmp_path, [(50, 1.0), (20, 1.5)])
    first = list(stream_pairs(cfg, "train"))
    assert list(stream_pairs(cfg, "train")) == first
    assert len({source_of(p) for p in first[:10]}) == 2  # interleaved, not one after the other


@pytest.mark.parametrize("fmt", ["text", "tsv", "jsonl"])
def test_streamed_and_in_memory_reads_give_the_same_pairs(tmp_path, fmt):
    cfg = mixed_config(tmp_path, [(40, 2.0), (25, 1.0), (7, 0.5)], fmt)
    corpus = load_split(cfg, "train")
    read = zip(corpus["src"], corpus["tgt"], corpus["direction"], strict=True)
    assert list(read) == list(stream_pairs(cfg, "train"))


def test_a_single_source_reads_as_the_plain_path(tmp_path):
    prefix = write_corpus(tmp_path, "a", "text", numbered("a", 12))
    plain = DataConfig(train=prefix)
    listed = DataConfig(train=(TrainSource(prefix, 5.0),))
    assert list(stream_pairs(listed, "train")) == list(stream_pairs(plain, "train"))
    assert load_split(listed, "train")["src"] == load_split(plain, "train")["src"]


def test_another_weight_or_source_is_another_cache_entry(tmp_path, valid_tokenizers):
    tok = valid_tokenizers.src

    def key(cfg: DataConfig) -> str:
        corpus = load_split(cfg, "train")
        return corpus_key(corpus["src"], corpus["tgt"], tok, tok)

    cfg = mixed_config(tmp_path, [(30, 1.0), (30, 1.0)])
    a, b = cfg.train
    base = key(cfg)
    assert key(DataConfig(train=(a, TrainSource(b.path, 3.0)))) != base
    assert key(DataConfig(train=(a,))) != base
    assert key(DataConfig(train=(TrainSource(a.path, 2.0), TrainSource(b.path, 2.0)))) == base


def test_errors_name_the_source_and_the_line(tmp_path):
    good = write_corpus(tmp_path, "a", "tsv", numbered("a", 5))
    bad = tmp_path / "b.tsv"
    bad.write_text("x\ty\nno tab here\n")
    cfg = DataConfig(format="tsv", train=(TrainSource(good), TrainSource(str(bad))))
    with pytest.raises(DataError, match=rf"{bad}:2: expected 2 tab-separated fields"):
        load_split(cfg, "train")
    with pytest.raises(DataError, match=rf"{bad}:2: expected 2 tab-separated fields"):
        list(stream_pairs(cfg, "train"))
    text = write_corpus(tmp_path, "c", "text", numbered("c", 5))
    missing = DataConfig(train=(TrainSource(text), TrainSource("nowhere/x")))
    with pytest.raises(DataError, match=r"^data\.train\[1\]='nowhere/x': nowhere/x\.de not"):
        check_sources(missing, ("train",))


def test_an_empty_source_is_named_when_streamed(tmp_path):
    (tmp_path / "empty.tsv").write_text("")
    cfg = DataConfig(
        format="tsv",
        train=(
            TrainSource(write_corpus(tmp_path, "a", "tsv", numbered("a", 5))),
            TrainSource(str(tmp_path / "empty.tsv")),
        ),
    )
    with pytest.raises(DataError, match=r"data\.train\[1\]='.*empty\.tsv': no pairs"):
        list(stream_pairs(cfg, "train"))


@pytest.mark.parametrize("streaming", [False, True])
def test_a_source_drawn_almost_never_is_refused_by_its_key(tmp_path, streaming):
    """An epoch ends when the rarest source has been read to its end: 1e30 pairs here."""
    cfg = mixed_config(tmp_path, [(10, 1.0), (10, 1e-30)])
    with pytest.raises(MixError, match=r"^data\.train\[1\]\.weight=1e-30: .* under 1e-06"):
        list(stream_pairs(cfg, "train")) if streaming else load_split(cfg, "train")


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("temperature", [0.001, 1e-300])
def test_a_temperature_near_zero_is_refused_with_the_source_it_starves(
    tmp_path, streaming, temperature
):
    """Even where every share's power underflows to 0 (1e-300): the larger source's stays."""
    cfg = mixed_config(tmp_path, [(10, 1.0), (20, 1.0)], temperature=temperature)
    starved = r"^data\.train\[0\]\.weight=1 at data\.temperature=[0-9.e-]+: the source is"
    with pytest.raises(MixError, match=starved + r" drawn for [0-9.e-]+ of the pairs, under"):
        list(stream_pairs(cfg, "train")) if streaming else load_split(cfg, "train")


def test_a_streamed_epoch_repeating_the_rest_over_100_times_is_refused_as_it_shows(tmp_path):
    """Sizes unknown up front, the stream stops once it has drawn 100 times the distinct pairs
    read: a tokenizer's sample or a shortlist would read the whole epoch (about 1e6 pairs
    here) before training starts, without a word."""
    cfg = mixed_config(tmp_path, [(10, 1.0), (20, 1e5)], streaming=True)
    refused = r"^data\.train\[0\]: an epoch ends when this source, drawn for 1e-05 of the pairs"
    with pytest.raises(MixError, match=refused + r".*over 100 times the \d+ distinct pairs"):
        list(stream_pairs(cfg, "train"))
    assert len(list(stream_pairs(mixed_config(tmp_path, [(10, 1.0), (20, 5.0)]), "train"))) < 300


def test_an_epoch_too_long_to_hold_is_streamed_instead(tmp_path):
    weight = 0.1 / IN_MEMORY_REPEATS  # b's 10 pairs at a share of ~0.001: an epoch of ~1e4
    cfg = mixed_config(tmp_path, [(20, 1.0), (10, weight)])
    with pytest.raises(MixError, match=r"about 1e\+04 pairs, over 100 times the 30 read.*stream"):
        load_split(cfg, "train")
    streamed = [source_of(pair) for pair in itertools.islice(stream_pairs(cfg, "train"), 3000)]
    assert set(streamed) == {"a", "b"}  # streamed, the same mix is read as it goes


def test_a_streamed_corpus_of_blank_lines_is_named(tmp_path):
    for lang in ("de", "en"):
        (tmp_path / f"blank.{lang}").write_text("\n  \n\n")
    cfg = DataConfig(train=str(tmp_path / "blank"))
    with pytest.raises(DataError, match=r"^data\.train='.*blank': no pairs$"):
        list(stream_pairs(cfg, "train"))


def test_messages_name_the_sources_by_their_paths(tmp_path, valid_tokenizers):
    tok = valid_tokenizers.src
    cfg = mixed_config(tmp_path, [(5, 1.0), (5, 2.0)], max_len=1, cache_dir=str(tmp_path))
    a, b = cfg.train
    with pytest.raises(DataError) as caught:
        encode_splits(cfg, tok, tok, num_threads=1)  # "a 0" is two tokens: none kept
    assert str(caught.value).startswith(f"{a.path}, {b.path}: no training pairs left after")
    assert describe_split(DataConfig(train="data/x/train")) == "data/x/train"


@pytest.fixture
def slice_sources(tmp_path):
    """The Multi30k slice as two text corpora, 300 and 100 pairs, weighted 1 and 2."""
    pairs = list(zip(slice_lines("valid", "de"), slice_lines("valid", "en"), strict=True))
    sources = (
        TrainSource(write_corpus(tmp_path, "first", "text", pairs[:300]), 1.0),
        TrainSource(write_corpus(tmp_path, "second", "text", pairs[300:]), 2.0),
    )
    return data_config(tmp_path, train=sources, valid=sources[1].path)


def test_streamed_batches_hold_the_in_memory_training_set_and_resume(
    slice_sources, valid_tokenizers
):
    tok = valid_tokenizers.src
    in_memory = encode_splits(
        dataclasses.replace(slice_sources, streaming=False), tok, tok, num_threads=1
    )

    reader = cursor(slice_sources, valid_tokenizers)
    streamed = sorted(numbers(read_epoch(reader)))
    assert streamed == in_memory.train_keep.tolist()  # the same pairs kept, by the same numbers
    while reader.position.chunk < 2 or reader.position.batch_index < 1:
        next(reader)
    resumed = cursor(slice_sources, valid_tokenizers)
    resumed.restore(reader.state())
    assert [next(resumed).indices.tolist() for _ in range(5)] == [
        next(reader).indices.tolist() for _ in range(5)
    ]


# --- config -------------------------------------------------------------------------------

LISTED = """\
data:
  train:
    - {path: data/europarl/train, weight: 3}
    - {path: data/paracrawl/train}
"""


def test_a_list_loads_as_sources_and_round_trips(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(LISTED)
    cfg = load_config(path)
    assert cfg.data.train == (
        TrainSource("data/europarl/train", 3.0),
        TrainSource("data/paracrawl/train", 1.0),
    )
    out = tmp_path / "resolved.yaml"
    dump_config(cfg, out)
    assert load_config(out) == cfg
    assert config_to_dict(cfg)["data"]["train"][0] == {
        "path": "data/europarl/train",
        "weight": 3.0,
        "src_lang": None,
        "tgt_lang": None,
        "tagged": False,
    }


def test_a_plain_string_keeps_its_meaning(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("data:\n  train: data/x/train\n")
    assert load_config(path).data.train == "data/x/train"
    listed = load_config(path, ["data.train=[{path: a, weight: 2}, {path: b}]"])
    assert listed.data.train == (TrainSource("a", 2.0), TrainSource("b", 1.0))
    assert load_config(path, ["data.train=data/y/train"]).data.train == "data/y/train"


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ("[]", r"data\.train: the list of sources is empty"),
        ("[{path: a}, {path: b, weight: -1}]", r"data\.train\[1\]\.weight=-1 must be > 0"),
        ("[{path: a, weight: 0}]", r"data\.train\[0\]\.weight=0 must be > 0"),
        (
            "[{path: a, weight: .inf}]",
            r"data\.train\[0\]\.weight: expected a finite number, got inf",
        ),
        ("[{path: a, weight: heavy}]", r"data\.train\[0\]\.weight: expected a number"),
        ("[{path: a, wieght: 2}]", r"data\.train\[0\]\.wieght: unknown key \(did you mean 'w"),
        ("[{weight: 2}]", r"data\.train\[0\]\.path: required key missing"),
        ("[{path: ''}]", r"data\.train\[0\]\.path is empty"),
        ("[data/a/train]", r"data\.train\[0\]: expected a mapping, got 'data/a/train'"),
        ("{path: a, weight: 2}", r"data\.train: expected a string or a list, got \{'path'"),
        ("5", r"data\.train: expected a string or a list, got 5"),
    ],
)
def test_bad_sources_are_one_line_errors_naming_the_key(tmp_path, train, message):
    path = tmp_path / "exp.yaml"
    path.write_text(f"data:\n  train: {train}\n")
    with pytest.raises(ConfigError, match=message) as err:
        load_config(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_a_bad_override_of_the_list_is_blamed_on_the_override(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("")
    override = "data.train=[{path: a, weight: 0}]"
    with pytest.raises(ConfigError, match=r"weight=0 must be > 0 \[override 'data\.train="):
        load_config(path, [override])
