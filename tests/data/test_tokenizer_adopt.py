"""A given SentencePiece model (`tokenizer.model_file`): renumbered to pad 0, unk 1, bos 2,
eos 3, it segments every text exactly as the original does; what cannot be used is one line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import sentencepiece as spm

from tests.corpora import slice_lines
from transformer_mt.config import ConfigError, TokenizerConfig
from transformer_mt.data.tokenizer import Tokenizer, TokenizerError
from transformer_mt.data.tokenizer_adopt import adopt_tokenizers, model_sizes, renumbered_model

# Held-out text with characters the models never saw (Czech, French): unknown pieces too.
HELD_OUT = slice_lines("test2016", "cs")[:150] + slice_lines("test2016", "fr")[:150]


def train_spm(path, texts: list[str], **options) -> str:
    """A SentencePiece model as `spm_train` would write it, with `options` as given."""
    model = io.BytesIO()
    settings = {"model_type": "bpe", "vocab_size": 400, "minloglevel": 2} | options
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model, **settings)
    path.write_bytes(model.getvalue())
    return str(path)


def processor(data: bytes) -> spm.SentencePieceProcessor:
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(data)
    return sp


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return slice_lines("train", "de") + slice_lines("train", "en")


LAYOUTS = {
    "spm_train defaults (unk 0, bos 1, eos 2, no pad)": {},
    "unigram": {"model_type": "unigram"},
    "no bos, no eos": {"bos_id": -1, "eos_id": -1},
    "every special elsewhere": {"pad_id": 5, "unk_id": 2, "bos_id": 0, "eos_id": 1},
    "ours already": {"pad_id": 0, "unk_id": 1, "bos_id": 2, "eos_id": 3},
    "byte fallback": {"byte_fallback": True},
    "user-defined symbols": {"user_defined_symbols": ["<sep>", "%%"]},
}


@pytest.mark.parametrize("options", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_renumbered_model_segments_as_the_original(tmp_path, texts, options):
    path = train_spm(tmp_path / "given.model", texts, **options)
    original = processor(Path(path).read_bytes())
    ours = Tokenizer.from_bytes(renumbered_model("tokenizer.model_file", path).SerializeToString())
    sp = ours._sp
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3)
    assert [ours.id_to_piece(i) for i in range(4)][1] == original.id_to_piece(original.unk_id())
    sample = HELD_OUT + texts[:100] + ["<sep> %% x"]
    pieces = sp.encode(sample, out_type=str)
    assert pieces == original.encode(sample, out_type=str)
    assert [ours.decode(ids) for ids in ours.encode_batch(sample)] == [
        original.decode(ids) for ids in original.encode(sample)
    ]
    # Only the specials the original lacks are new pieces; no piece is lost.
    lacking = [original.pad_id(), original.bos_id(), original.eos_id()].count(-1)
    assert ours.vocab_size == original.get_piece_size() + lacking
    assert {sp.id_to_piece(i) for i in range(4, ours.vocab_size)} <= {
        original.id_to_piece(i) for i in range(original.get_piece_size())
    }


def test_language_tags_and_symbols_become_whole_pieces(tmp_path, texts):
    # ">>fr<<" exists as a piece the text can split; ">>cs<<" and "<BT>" do not exist.
    path = train_spm(tmp_path / "given.model", texts, user_defined_symbols=[">>fr<<"])
    cfg = TokenizerConfig(model_file=path, language_tags=("fr", "cs"))
    pair = adopt_tokenizers(cfg, tmp_path / "run", symbols=["<BT>"])
    tok = pair.src
    for piece in (">>fr<<", ">>cs<<", "<BT>"):
        assert tok.piece_id(piece) > 3
        assert tok.piece_id(piece) in tok.encode(f"{piece} ein Hund")  # whole, never split
    assert pair.joint and pair.src_path.parent == tmp_path / "run"
    assert pair.src_path.name.startswith("spm-joint-")
    # The saved file is the renumbered model, and a second adoption finds the same name.
    assert pair.src_path.read_bytes() == tok.model_bytes
    assert adopt_tokenizers(cfg, tmp_path / "run", ["<BT>"]).src_path == pair.src_path


def test_separate_models_for_source_and_target(tmp_path, texts):
    de = train_spm(tmp_path / "de.model", slice_lines("train", "de"), vocab_size=300)
    en = train_spm(tmp_path / "en.model", slice_lines("train", "en"), vocab_size=200)
    cfg = TokenizerConfig(joint=False, model_file=de, tgt_model_file=en)
    pair = adopt_tokenizers(cfg, tmp_path / "run")
    assert not pair.joint
    assert (pair.src.vocab_size, pair.tgt.vocab_size) == (301, 201)
    assert model_sizes(cfg) == (300, 200)
    assert {pair.src_path.name[:8], pair.tgt_path.name[:8]} == {"spm-src-", "spm-tgt-"}


def test_trained_sizes_without_a_given_model():
    assert model_sizes(TokenizerConfig(vocab_size=1234)) == (1234, 1234)


def test_what_cannot_be_used_is_one_line(tmp_path, texts):
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"\xff\x00 not a model at all")
    empty = tmp_path / "empty.model"
    empty.write_bytes(b"")
    cases = {
        str(tmp_path / "missing.model"): "tokenizer.model_file .*missing.model: not found",
        str(tmp_path): "tokenizer.model_file .*: is a directory, not a regular file",
        str(garbage): "tokenizer.model_file .*garbage.model: not a SentencePiece model",
        str(empty): "tokenizer.model_file .*empty.model: not a SentencePiece model",
    }
    for path, message in cases.items():
        with pytest.raises(TokenizerError, match=message) as err:
            adopt_tokenizers(TokenizerConfig(model_file=path), tmp_path / "run")
        assert "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_bpe_dropout_needs_a_bpe_model(tmp_path, texts):
    path = train_spm(tmp_path / "given.model", texts, model_type="unigram")
    cfg = TokenizerConfig(model_file=path, bpe_dropout=0.1)
    with pytest.raises(TokenizerError, match="needs a BPE model, and this one is unigram"):
        adopt_tokenizers(cfg, tmp_path / "run")
    bpe = train_spm(tmp_path / "bpe.model", texts)
    tok = adopt_tokenizers(TokenizerConfig(model_file=bpe, bpe_dropout=0.1), tmp_path / "r").src
    assert tok.encode_dropout(texts[:20], 0.0, seed=1) == tok.encode_batch(texts[:20])


def test_a_missing_special_whose_name_a_piece_has(tmp_path, texts):
    # No pad id, but "<pad>" is one of the model's own (user-defined) pieces.
    path = train_spm(tmp_path / "given.model", texts, user_defined_symbols=["<pad>"])
    with pytest.raises(TokenizerError, match="no special piece for <pad> but a piece"):
        renumbered_model("tokenizer.model_file", path)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"tgt_model_file": "b.model"}, "tgt_model_file needs tokenizer.joint: false"),
        ({"joint": False, "tgt_model_file": "b.model"}, "tgt_model_file needs tokenizer.model_"),
        ({"joint": False, "model_file": "a.model"}, "needs tokenizer.tgt_model_file too"),
        ({"model_file": "a.model", "vocab_size": 300}, r"^tokenizer.vocab_size: .* remove it$"),
        (
            {"model_file": "a.model", "extra_text": ("x.txt",), "model_type": "unigram"},
            r"^tokenizer.model_type, tokenizer.extra_text: .* remove them$",
        ),
    ],
)
def test_config_rules(settings, message):
    with pytest.raises(ConfigError, match=message):
        TokenizerConfig(**settings).validate()


def test_config_accepts_given_models():
    TokenizerConfig(model_file="a.model", language_tags=("de",), bpe_dropout=0.1).validate()
    TokenizerConfig(joint=False, model_file="a.model", tgt_model_file="b.model").validate()


def test_a_wanted_piece_the_model_has_as_a_subword_becomes_whole(tmp_path, texts):
    path = train_spm(tmp_path / "given.model", texts)
    original = processor(Path(path).read_bytes())
    word = next(
        original.id_to_piece(i)
        for i in range(original.get_piece_size())
        if len(original.id_to_piece(i)) >= 4 and not original.id_to_piece(i).startswith(("▁", "<"))
    )
    proto = renumbered_model("tokenizer.model_file", path, wanted=[word])
    types = {piece.piece: piece.type for piece in proto.pieces}
    assert types[word] == 4 and len(proto.pieces) == original.get_piece_size() + 1  # + pad


def test_a_training_key_written_at_its_default_beside_a_model_file_is_refused(tmp_path):
    """`vocab_size: 8000` (the default) had been accepted and ignored, and recorded in the
    run's config.yaml beside a model of another size."""
    from transformer_mt.config import load_config

    config = tmp_path / "c.yaml"
    config.write_text("tokenizer:\n  model_file: a.model\n  vocab_size: 8000\n", "utf-8")
    with pytest.raises(ConfigError, match=r"^tokenizer.vocab_size: .* remove it \[in "):
        load_config(config)
    config.write_text("tokenizer:\n  model_file: a.model\n", "utf-8")
    assert load_config(config).tokenizer.vocab_size == 8000  # unset: no refusal
