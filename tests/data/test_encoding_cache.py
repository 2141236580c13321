"""The encoded-corpus cache shared by runs: concurrent writers, killed writers, damaged entries
and a cache folder that cannot be written."""

from __future__ import annotations

import errno
import logging
import subprocess
import sys
import threading

import datasets
import pytest

from transformer_mt.data import encoding
from transformer_mt.data.encoding import encode_corpus


@pytest.fixture(scope="module")
def corpus(valid_texts) -> datasets.Dataset:
    src, tgt = valid_texts
    return datasets.Dataset.from_dict({"src": src[:50], "tgt": tgt[:50]})


def entries(cache):
    """Every name in the cache folder, temporaries included."""
    return sorted(p.name for p in cache.iterdir())


def test_two_runs_caching_one_corpus_at_once_both_succeed(
    corpus, valid_tokenizers, tmp_path, monkeypatch, caplog
):
    """Both writers finish their temporaries before either renames (the interleaving that
    killed the second run when they shared one temporary name); the first rename wins and
    the other keeps the winner's entry."""
    cache = tmp_path / "cache"
    both_written = threading.Barrier(2, timeout=30)
    save_to_disk = datasets.Dataset.save_to_disk

    def save_then_wait(self, path, *args, **kwargs):
        save_to_disk(self, path, *args, **kwargs)
        both_written.wait()

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", save_then_wait)
    tok = valid_tokenizers
    results, errors = [], []

    def run() -> None:
        try:
            results.append(encode_corpus(corpus, tok.src, tok.tgt, cache))
        except Exception as err:  # reported below, with the other thread's result
            errors.append(err)

    with caplog.at_level(logging.INFO, logger="transformer_mt.data.encoding"):
        threads = [threading.Thread(target=run) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors and len(results) == 2
    assert results[0].src.values.tolist() == results[1].src.values.tolist()
    (entry,) = entries(cache)  # one entry, no temporary left behind
    assert entry.startswith("encoded-")
    assert "another run cached this corpus" in caplog.text
    monkeypatch.undo()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="transformer_mt.data.encoding"):
        again = encode_corpus(corpus, tok.src, tok.tgt, cache)
    assert "loading encoded corpus" in caplog.text
    assert again.tgt.values.tolist() == results[0].tgt.values.tolist()


def test_temporaries_of_killed_writers_are_removed(corpus, valid_tokenizers, tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tok = valid_tokenizers
    cache = tmp_path / "cache"
    encode_corpus(corpus, tok.src, tok.tgt, cache)
    (entry,) = entries(cache)
    (cache / entry).rename(cache / f".{entry}.tmp{dead}-x1")  # killed before its rename
    live = cache / f".{entry}.tmp1-x2"  # pid 1 runs: a writer still at work
    live.mkdir()
    encode_corpus(corpus, tok.src, tok.tgt, cache)
    assert entries(cache) == sorted([entry, live.name])


def test_a_damaged_entry_is_encoded_again_and_replaced(corpus, valid_tokenizers, tmp_path, caplog):
    tok = valid_tokenizers
    cache = tmp_path / "cache"
    first = encode_corpus(corpus, tok.src, tok.tgt, cache)
    (entry,) = entries(cache)
    for arrow in (cache / entry).glob("*.arrow"):
        arrow.write_bytes(b"damaged")
    with caplog.at_level(logging.WARNING):
        again = encode_corpus(corpus, tok.src, tok.tgt, cache)
    assert "unreadable encoded corpus" in caplog.text
    assert again.src.values.tolist() == first.src.values.tolist()
    assert entries(cache) == [entry]
    caplog.clear()
    assert encode_corpus(corpus, tok.src, tok.tgt, cache).n_tokens == first.n_tokens
    assert "unreadable" not in caplog.text


def test_an_entry_of_another_corpus_is_encoded_again(corpus, valid_tokenizers, tmp_path, caplog):
    """An entry renamed, or copied from another cache: its rows had been trained on."""
    import shutil

    tok = valid_tokenizers
    cache = tmp_path / "cache"
    first = encode_corpus(corpus, tok.src, tok.tgt, cache)
    (entry,) = entries(cache)
    shutil.rmtree(cache / entry)
    other = corpus.select(range(20))
    encode_corpus(other, tok.src, tok.tgt, tmp_path / "other")
    (other_entry,) = entries(tmp_path / "other")
    shutil.move(tmp_path / "other" / other_entry, cache / entry)
    with caplog.at_level(logging.WARNING):
        again = encode_corpus(corpus, tok.src, tok.tgt, cache)
    assert "20 rows for a corpus of 50 pairs; encoding it again" in caplog.text
    assert again.src.values.tolist() == first.src.values.tolist()
    assert len(encode_corpus(corpus, tok.src, tok.tgt, cache)) == 50  # replaced


def test_a_cache_that_cannot_be_written_is_a_warning(
    corpus, valid_tokenizers, tmp_path, monkeypatch, caplog
):
    def disk_full(self, path, *args, **kwargs):
        (encoding.Path(path) / "part.arrow").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", disk_full)
    tok = valid_tokenizers
    cache = tmp_path / "cache"
    with caplog.at_level(logging.WARNING):
        encoded = encode_corpus(corpus, tok.src, tok.tgt, cache)
    assert len(encoded) == len(corpus)
    assert "could not cache the encoded corpus" in caplog.text
    assert "No space left on device" in caplog.text
    assert entries(cache) == []  # nothing half-written
