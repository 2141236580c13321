"""The vocabulary map file: written and read back, bad lines named."""

import os
import re

import pytest

from transformer_mt.errors import TmtError
from transformer_mt.shortlist.vmap import Entry, Vmap, Vocabularies, read_vmap, write_vmap


def test_round_trip_keeps_order_and_the_always_line(tmp_path):
    path = tmp_path / "v.txt"
    write_vmap(path, ["▁the", "."], {"▁Hund": ["▁dog", "▁dogs"], "▁Katze": ["▁cat"]})
    assert path.read_text() == "\t▁the .\n▁Hund\t▁dog ▁dogs\n▁Katze\t▁cat\n"
    entries = [
        Entry(1, "", ("▁the", ".")),
        Entry(2, "▁Hund", ("▁dog", "▁dogs")),
        Entry(3, "▁Katze", ("▁cat",)),
    ]
    assert read_vmap(path) == Vmap(entries, None)


def test_the_vocabularies_line_comes_first_and_reads_back(tmp_path):
    path = tmp_path / "v.txt"
    named = Vocabularies("0123abcd", "4567ef01")
    write_vmap(path, ["."], {"▁Hund": ["▁dog"]}, named)
    lines = path.read_text().splitlines()
    assert lines[0] == "#vocabularies\tsource=0123abcd target=4567ef01"
    assert read_vmap(path) == Vmap([Entry(2, "", (".",)), Entry(3, "▁Hund", ("▁dog",))], named)
    assert named.differing(Vocabularies("0123abcd", "ffff")) == ["target"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("\ta\nb c\n", "line 2: no tab"),
        ("a b\tc\n", "line 1: one source piece, a tab"),
        ("a\tb\na\tc\n", "line 2: source piece 'a' again (first on line 1)"),
        ("#vocabularies\tsource=ab\n", "line 1: #vocabularies expects 'source=DIGEST target"),
        ("#vocabularies\tsource= target=cd\n", "line 1: #vocabularies expects"),
    ],
)
def test_bad_lines_are_named_by_file_and_line(tmp_path, text, message):
    path = tmp_path / "v.txt"
    path.write_text(text)
    with pytest.raises(TmtError, match="^" + re.escape(f"{path}:{message.removeprefix('line ')}")):
        read_vmap(path)


def test_a_shortlist_that_is_no_regular_file_is_refused_not_waited_on(tmp_path):
    """A named pipe would be opened and waited on for a writer that never comes."""
    pipe = tmp_path / "v.pipe"
    os.mkfifo(pipe)
    with pytest.raises(TmtError, match="^" + re.escape(f"{pipe}: a named pipe (FIFO), not a")):
        read_vmap(pipe)
    with pytest.raises(TmtError, match="^" + re.escape(f"{tmp_path}: a directory, not a")):
        read_vmap(tmp_path)
