"""Tokenizer: round trip, fixed special ids, reuse instead of retraining, clear errors."""

import dataclasses
import re
import subprocess
import sys

import pytest

from transformer_mt.config import TokenizerConfig
from transformer_mt.data.specials import own_specials
from transformer_mt.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    TokenizerError,
)
from transformer_mt.data.tokenizer_training import tokenizer_key, train_tokenizers


def test_round_trip_on_multi30k_valid(valid_tokenizers, valid_texts):
    tok = valid_tokenizers.src
    for line in valid_texts[0] + valid_texts[1]:
        assert tok.decode(tok.encode(line)) == tok.normalize(line)


def test_special_ids_are_fixed(valid_tokenizers):
    tok = valid_tokenizers.src
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    pieces = [tok.id_to_piece(i) for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)]
    assert pieces == ["<pad>", "<unk>", "<s>", "</s>"]
    ids = tok.encode("Ein Mann fährt Fahrrad.")
    assert ids and not set(ids) & {PAD_ID, BOS_ID, EOS_ID}
    assert tok.decode([BOS_ID, *ids, EOS_ID, PAD_ID]) == tok.decode(ids)


def test_joint_by_default_and_loads_from_bytes(valid_tokenizers):
    assert valid_tokenizers.joint
    assert valid_tokenizers.src_path.exists()
    again = Tokenizer.from_bytes(valid_tokenizers.src.model_bytes)
    assert again.vocab_size == valid_tokenizers.src.vocab_size == 500
    assert again.encode("Zwei Hunde spielen.") == valid_tokenizers.src.encode("Zwei Hunde spielen.")


def test_separate_vocabularies(tmp_path, valid_texts):
    src, tgt = valid_texts
    pair = train_tokenizers(TokenizerConfig(vocab_size=300, joint=False), src, tgt, tmp_path)
    assert not pair.joint
    assert pair.src_path != pair.tgt_path
    assert pair.src.sha256 != pair.tgt.sha256


def test_a_sampled_corpus_gives_the_same_tokenizer_in_every_process(tmp_path, valid_texts):
    """SentencePiece's own sample of `input_sentence_size` sentences differs from one process
    to the next (its seed set or not): two runs of one corpus had written two models under one
    cached name."""
    src, tgt = valid_texts
    script = (
        "import sys\n"
        "from transformer_mt.config import TokenizerConfig\n"
        "from transformer_mt.data.tokenizer_training import train_tokenizers\n"
        "src, tgt = (open(p, encoding='utf-8').read().splitlines() for p in sys.argv[1:3])\n"
        "cfg = TokenizerConfig(vocab_size=300, input_sentence_size=200)\n"
        "sys.stdout.write(train_tokenizers(cfg, src, tgt, sys.argv[3]).src.sha256)\n"
    )
    (tmp_path / "src.txt").write_text("\n".join(src), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("\n".join(tgt), encoding="utf-8")
    command = [sys.executable, "-c", script, tmp_path / "src.txt", tmp_path / "tgt.txt"]
    digests = [
        subprocess.run(
            [*command, tmp_path / run], capture_output=True, text=True, check=True
        ).stdout
        for run in ("run1", "run2")
    ]
    assert len(src) + len(tgt) > 200 and digests[0] == digests[1]


def test_retraining_is_skipped(tmp_path, valid_texts):
    src, tgt = valid_texts
    cfg = TokenizerConfig(vocab_size=300)
    first = train_tokenizers(cfg, src[:300], tgt[:300], tmp_path / "run1", tmp_path / "cache")
    mtime = first.src_path.stat().st_mtime_ns
    second = train_tokenizers(cfg, src[:300], tgt[:300], tmp_path / "run1", tmp_path / "cache")
    assert second.src_path == first.src_path
    assert second.src_path.stat().st_mtime_ns == mtime
    third = train_tokenizers(cfg, src[:300], tgt[:300], tmp_path / "run2", tmp_path / "cache")
    assert third.src.model_bytes == first.src.model_bytes  # copied from the cache
    other = train_tokenizers(cfg, src[:301], tgt[:301], tmp_path / "run1")
    assert other.src_path != first.src_path  # different corpus, different name


def test_a_cache_that_cannot_be_written_is_a_warning(tmp_path, valid_texts, caplog):
    """The run keeps its tokenizer; only the copy for other runs is missing. Nothing is left
    half-written beside the run's own file."""
    src, tgt = valid_texts
    cache = tmp_path / "cache"
    cache.write_text("a file where the cache folder should be")
    pair = train_tokenizers(
        TokenizerConfig(vocab_size=300), src[:300], tgt[:300], tmp_path / "run", cache
    )
    assert pair.src.vocab_size == 300
    assert "could not cache the tokenizer" in caplog.text
    assert [p.name for p in (tmp_path / "run").iterdir()] == [pair.src_path.name]


TINY = [
    "the quick brown fox jumps over the lazy dog",
    "zwei hunde spielen im schnee",
    "ein mann fährt rad",
] * 5  # 28 distinct characters: 32 pieces with the 4 special ones


def test_vocab_too_small_for_the_characters_says_raise(tmp_path):
    with pytest.raises(TokenizerError) as info:
        train_tokenizers(TokenizerConfig(vocab_size=20), TINY, TINY, tmp_path)
    message = str(info.value)
    assert message.startswith("tokenizer.vocab_size=20 is too small for the characters")
    assert "raise tokenizer.vocab_size to at least 32" in message
    assert "lower tokenizer.character_coverage" in message
    assert "too large" not in message and "\n" not in message
    assert not list(tmp_path.glob("*.model"))
    assert (
        train_tokenizers(TokenizerConfig(vocab_size=32), TINY, TINY, tmp_path).src.vocab_size == 32
    )


def test_byte_fallback_writes_characters_the_vocabulary_lacks_as_bytes(tmp_path):
    """A character the training text never held comes back from its UTF-8 bytes instead of
    the unknown piece; without byte_fallback it is lost to <unk>."""
    text = "Zoë und 漢字 spielen"  # ë and the kanji are not in TINY
    plain = train_tokenizers(TokenizerConfig(vocab_size=40), TINY, TINY, tmp_path / "a").src
    assert UNK_ID in plain.encode(text) and plain.decode(plain.encode(text)) != text
    cfg = TokenizerConfig(vocab_size=300, byte_fallback=True)
    pair = train_tokenizers(cfg, TINY, TINY, tmp_path / "b")
    ids = pair.src.encode(text)
    assert UNK_ID not in ids and pair.src.decode(ids) == text
    assert len(ids) > len(pair.src.encode("Zo und  spielen"))  # the bytes are pieces
    # Control characters could be spelled from bytes too (a newline would break the output's
    # lines): a model trained here never produces them; other bytes it may.
    never = own_specials(pair.tgt, ()).never
    assert {pair.tgt.piece_id(p) for p in ("<0x0A>", "<0x09>", "<0x00>", "<0x7F>")} <= set(never)
    assert pair.tgt.piece_id("<0xC5>") not in never and UNK_ID not in never
    # Another setting, another model file: a cached model without byte fallback never stands in.
    unset = dataclasses.replace(cfg, byte_fallback=False)
    assert tokenizer_key(cfg, [TINY]) != tokenizer_key(unset, [TINY])


def test_byte_fallback_counts_its_pieces_in_the_smallest_vocabulary(tmp_path):
    with pytest.raises(TokenizerError) as info:
        train_tokenizers(TokenizerConfig(vocab_size=200, byte_fallback=True), TINY, TINY, tmp_path)
    message = str(info.value)
    assert "256 byte pieces" in message and "to at least 288" in message


def test_vocab_too_large_for_the_corpus_says_lower(tmp_path):
    with pytest.raises(TokenizerError) as info:
        train_tokenizers(TokenizerConfig(vocab_size=5000), TINY, TINY, tmp_path)
    message = str(info.value)
    assert message.startswith("tokenizer.vocab_size=5000 is too large for this corpus of 30 lines")
    most = re.search(r"lower tokenizer\.vocab_size to (\d+) or less", message)
    assert most and "\n" not in message
    largest = int(most[1])  # the advice is exact: that size trains, one more does not
    assert train_tokenizers(TokenizerConfig(vocab_size=largest), TINY, TINY, tmp_path).src
    with pytest.raises(TokenizerError, match="too large"):
        train_tokenizers(TokenizerConfig(vocab_size=largest + 1), TINY, TINY, tmp_path)


def test_load_errors(tmp_path):
    with pytest.raises(TokenizerError, match="not found"):
        Tokenizer.load(tmp_path / "missing.model")
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(TokenizerError, match="bad.model"):
        Tokenizer.load(bad)


def test_paragraph_length_lines_are_learnt(tmp_path, valid_texts):
    """Lines over SentencePiece's default 4,192 bytes are learnt from, not skipped: here they
    are all the text there is, and only they hold the letter 'ж'."""
    src, tgt = (
        [" ".join(lines[i : i + 80]) + " ж" for i in range(0, 400, 80)] for lines in valid_texts
    )
    assert min(len(line.encode()) for line in src + tgt) > 4192
    pair = train_tokenizers(TokenizerConfig(vocab_size=300), src, tgt, tmp_path)
    assert UNK_ID not in pair.src.encode("ж")


def test_a_damaged_tokenizer_in_the_cache_or_the_run_is_trained_anew(tmp_path, valid_texts, caplog):
    """A truncated cache file is not copied into a new run, and a run directory that holds
    such a copy trains its model again, writing a whole one over it."""
    src, tgt = (texts[:300] for texts in valid_texts)
    cfg, cache = TokenizerConfig(vocab_size=300), tmp_path / "cache"
    whole = train_tokenizers(cfg, src, tgt, tmp_path / "run1", cache).src.model_bytes
    (cached,) = cache.iterdir()
    cached.write_bytes(whole[:1000])
    pair = train_tokenizers(cfg, src, tgt, tmp_path / "run2", cache)
    assert pair.src.model_bytes == whole and cached.read_bytes() == whole
    assert f"{cached}: unreadable tokenizer" in caplog.text
    pair.src_path.write_bytes(whole[:1000])
    again = train_tokenizers(cfg, src, tgt, tmp_path / "run2", cache)
    assert again.src_path.read_bytes() == whole
    assert f"{pair.src_path}: unreadable tokenizer" in caplog.text
