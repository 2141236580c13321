"""Tagged training sources (tagged back-translation): the tag starts the sources of tagged
sources only, alike in memory and streamed, stays one piece in the run's tokenizer, and is never
produced."""

import pytest

from tests.corpora import slice_lines
from transformer_mt.config import ConfigError, DataConfig, TokenizerConfig, TrainSource, load_config
from transformer_mt.data.dataset import column_texts, load_split, stream_pairs
from transformer_mt.data.pipeline import encode_splits, train_tokenizers_for
from transformer_mt.data.specials import BACK_TRANSLATION_TAG, OWN_SPECIALS, own_specials


def write_pair(directory, name: str, de: list[str], en: list[str]) -> str:
    (directory / f"{name}.de").write_text("".join(f"{line}\n" for line in de), "utf-8")
    (directory / f"{name}.en").write_text("".join(f"{line}\n" for line in en), "utf-8")
    return str(directory / name)


@pytest.fixture
def tagged_config(tmp_path) -> DataConfig:
    """Real pairs (the slice's first 150) and synthetic ones (its next 150), the latter tagged."""
    de, en = slice_lines("train", "de"), slice_lines("train", "en")
    real = write_pair(tmp_path, "real", de[:150], en[:150])
    synthetic = write_pair(tmp_path, "synthetic", de[150:], en[150:])
    sources = (TrainSource(real), TrainSource(synthetic, tagged=True))
    return DataConfig(train=sources, cache_dir=str(tmp_path / "cache"))


def test_only_tagged_sources_start_with_the_tag(tagged_config):
    corpus = load_split(tagged_config, "train")
    sources, targets = column_texts(corpus, "src"), column_texts(corpus, "tgt")
    de, en = slice_lines("train", "de"), slice_lines("train", "en")
    real, synthetic = (
        dict(zip(en[:150], de[:150], strict=True)),
        dict(zip(en[150:], de[150:], strict=True)),
    )
    seen = set()
    for source, target in zip(sources, targets, strict=True):
        if target in synthetic:
            assert source == f"{BACK_TRANSLATION_TAG} {synthetic[target]}"
            seen.add("synthetic")
        else:
            assert source == real[target]
            seen.add("real")
    assert seen == {"real", "synthetic"}
    streamed = list(stream_pairs(tagged_config, "train"))
    assert [(s, t) for s, t, _ in streamed] == list(zip(sources, targets, strict=True))


def test_the_tag_is_one_piece_and_never_produced(tagged_config, tmp_path):
    pair = train_tokenizers_for(tagged_config, TokenizerConfig(vocab_size=500), tmp_path / "run")
    tag = pair.src.piece_id(BACK_TRANSLATION_TAG)
    assert tag != OWN_SPECIALS.unk
    source = next(s for s in column_texts(load_split(tagged_config, "train"), "src") if "<BT>" in s)
    assert pair.src.encode(source).count(tag) == 1
    assert tag in own_specials(pair.tgt, ()).never


def test_untagged_corpora_keep_their_tokenizer(tagged_config, tmp_path):
    """Without a tagged source the tokenizer has no tag piece and the specials stay ours."""
    untagged = DataConfig(train=tagged_config.train[0].path, cache_dir=tagged_config.cache_dir)
    pair = train_tokenizers_for(untagged, TokenizerConfig(vocab_size=500), tmp_path / "run")
    assert pair.src.piece_id(BACK_TRANSLATION_TAG) == OWN_SPECIALS.unk
    assert own_specials(pair.tgt, ()) == OWN_SPECIALS


def test_tagged_key_from_yaml(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        "data:\n  train:\n    - {path: a}\n    - {path: b, weight: 0.5, tagged: true}\n"
    )
    loaded = load_config(config)
    assert [s.tagged for s in loaded.data.train] == [False, True]
    assert loaded.data.has_tagged_source()
    config.write_text("data:\n  train:\n    - {path: b, tagged: sometimes}\n")
    with pytest.raises(ConfigError, match=r"data\.train\[0\]\.tagged"):
        load_config(config)


def test_a_typed_tag_is_taken_out_of_a_text_to_translate(tagged_config, tmp_path):
    """The model reads the back-translation tag as "back-translated"; a user's text is not
    (it had reached the model as the tag itself). A typed tag goes with the word boundary
    SentencePiece writes before it (it had been left as a piece of its own)."""
    from transformer_mt.inference.encoding import LineEncoding
    from transformer_mt.inference.languages import Direction

    settings = TokenizerConfig(vocab_size=500, language_tags=("de", "en"))
    pair = train_tokenizers_for(tagged_config, settings, tmp_path / "run")
    specials = own_specials(pair.tgt, ("de", "en"))
    encoding = LineEncoding((pair.src, pair.tgt), specials, 64, Direction(None, None))
    plain = encoding.source_ids("ein hund läuft")
    for typed in (f"{BACK_TRANSLATION_TAG} ein hund läuft", "ein >>en<< hund läuft <BT>"):
        assert pair.src.encode_pieces(typed)[:2] in (["▁", "<BT>"], ["▁ein", "▁"])
        assert encoding.source_ids(typed) == plain
    assert encoding.tagged_lines == 2


def test_a_blank_tagged_source_stays_blank_and_is_dropped_as_empty(tmp_path):
    """Tagged, a blank source line had become the tag alone, two pieces, and was trained on;
    it is dropped as empty, as the same line untagged, in memory and streamed alike."""
    de, en = slice_lines("train", "de"), slice_lines("train", "en")
    real = write_pair(tmp_path, "real", de[:150], en[:150])
    synthetic = write_pair(tmp_path, "synthetic", ["", " \t", *de[152:]], en[150:])
    reports, blank_targets = [], set(en[150:152])
    for tagged in (False, True):
        sources = (TrainSource(real), TrainSource(synthetic, tagged=tagged))
        cfg = DataConfig(train=sources, valid=real, cache_dir=str(tmp_path / f"cache{tagged}"))
        corpus = load_split(cfg, "train")
        pairs = list(zip(column_texts(corpus, "src"), column_texts(corpus, "tgt"), strict=True))
        blank = [src for src, tgt in pairs if tgt in blank_targets]
        assert blank and set(blank) <= {"", " \t"}
        assert [(s, t) for s, t, _ in stream_pairs(cfg, "train")] == pairs
        tok = train_tokenizers_for(cfg, TokenizerConfig(vocab_size=500), tmp_path / f"run{tagged}")
        reports.append(encode_splits(cfg, tok.src, tok.tgt, num_threads=1).clean_report)
    assert reports[1].empty == reports[0].empty == len(blank)
