"""Source lines as the ids a search reads: cut to the position table (counted), refused whole
where the caller asks, and a line of megabytes encoded from its start only."""

from __future__ import annotations

import pytest

from tests.conftest import WORDS
from transformer_mt.inference import encoding as encoding_module
from transformer_mt.inference.encoding import LineTooLong
from transformer_mt.inference.translator import Translator


@pytest.fixture
def encoding(checkpoint):
    """The tiny checkpoint's: a position table of 64, so 63 tokens of room."""
    return Translator.from_checkpoint(str(checkpoint)).encoding


def test_a_line_longer_than_the_table_is_cut_and_counted_or_refused(encoding):
    fits = encoding.source_ids("ein mann")
    assert 0 < len(fits) < 63 and encoding.truncated_lines == 0
    line = " ".join(WORDS * 10)
    whole = encoding.src.encode(line)
    assert encoding.source_ids(line) == whole[:63] and encoding.truncated_lines == 1
    for given in (line, f"\u202b{line}\u202c"):  # bidi controls are not read, nor counted
        with pytest.raises(LineTooLong, match=rf"^{len(whole)} source tokens; the model reads "):
            encoding.source_ids(given, cut=False)
    assert encoding.source_ids("ein mann", cut=False) == fits


def test_a_line_of_megabytes_is_encoded_from_its_start_only(encoding, monkeypatch):
    """SentencePiece's memory grows with the text it is given (840 MB for a line of 20 MB),
    and no token past the table's room is read: the line had been encoded whole."""
    line = " ".join(WORDS * 20_000)  # about 1 MB, 280,000 words
    expected = encoding.src.encode(line)[:63]
    pieces = encoding.src.encode_pieces(line)[:63]
    given = []
    encode = encoding.src.encode

    def spy(text, *args, **kwargs):
        given.append(len(text))
        return encode(text, *args, **kwargs)

    monkeypatch.setattr(encoding.src, "encode", spy)
    assert encoding.source_ids(line) == expected and encoding.truncated_lines == 1
    assert encoding.source_pieces(line) == pieces
    assert given and max(given) <= encoding_module.CHARS_PER_TOKEN * 63 < len(line) // 10
    with pytest.raises(LineTooLong, match=r"^more source tokens; the model reads at most 63$"):
        encoding.source_ids(line, cut=False)


def test_a_long_line_mostly_of_spaces_is_read_until_it_holds_enough_tokens(encoding):
    """SentencePiece folds runs of whitespace: the line's start may hold too few tokens to
    fill the table, and more of it is read."""
    line = " " * (encoding_module.CHARS_PER_TOKEN * 63 * 2) + " ".join(WORDS * 100)
    assert encoding.source_ids(line) == encoding.src.encode(line)[:63]
