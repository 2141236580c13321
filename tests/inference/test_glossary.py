"""Glossary files and constraints files: what is found where, and one-line errors naming the
file and line for every kind of bad input."""

import pytest

from transformer_mt.errors import TmtError
from transformer_mt.inference.glossary import MAX_TERM_CHARS, Glossary, iter_constraints


def glossary_file(tmp_path, text: str | bytes):
    path = tmp_path / "terms.tsv"
    if isinstance(text, str):
        text = text.encode("utf-8")
    path.write_bytes(text)
    return path


def test_terms_are_found_at_word_boundaries_longest_first(tmp_path):
    path = glossary_file(
        tmp_path,
        "Hund\tdog\nNew York\tNew York\nYork\tYorkshire\nC++\tC++\nrot\tred\n\n   \n",
    )
    glossary = Glossary.load(path)
    assert len(glossary.terms) == 5  # blank lines skipped
    # Not inside a longer word, before or after; the longest term where terms overlap; a
    # do-not-translate term as spelled; whitespace runs inside a term; regex characters.
    assert glossary.targets("Hunde und Schäferhund") == []
    assert glossary.targets("ein Hund, ein rotes Auto") == ["dog"]
    assert glossary.targets("New  York und York") == ["New  York", "Yorkshire"]
    assert glossary.targets("C++ ist rot, C++ auch") == ["C++", "red"]
    assert glossary.targets("hund") == []  # case matters unless asked


def test_of_overlapping_terms_the_first_wins_then_the_longest():
    glossary = Glossary.of_pairs([("New York", "NYC"), ("York City", "YC")])
    assert glossary.targets("In New York City") == ["NYC"]  # first, though shorter
    assert glossary.targets("York City, New York") == ["YC", "NYC"]
    glossary = Glossary.of_pairs([("New York", "NYC"), ("New York City", "NY City")])
    assert glossary.targets("In New York City") == ["NY City"]  # same start: the longest


def test_no_term_is_found_holding_a_kept_character():
    glossary = Glossary.of_pairs(
        [("Hund", "dog"), ("Schäfer", "shepherd"), ("New York", "NYC"), ("New York City", "NY")]
    )
    assert glossary.targets("Der Hund bellt", [(4, 8)]) == []
    assert glossary.targets("Der Hund bellt, der Hund", [(4, 8)]) == ["dog"]  # once outside
    # Kept text still joins the word it touches, and hides no term beside it.
    assert glossary.targets("ein Schäferhund", [(11, 15)]) == []
    assert glossary.targets("in New York City", [(12, 16)]) == ["NYC"]
    # A term that could match the "_" kept characters are read as is not found in them.
    assert Glossary.of_pairs([("a_b", "x")]).targets("a_b", [(1, 2)]) == []


def test_ignore_case_finds_any_case_and_keeps_do_not_translate_as_written(tmp_path):
    path = glossary_file(tmp_path, "hund\tdog\niphone\tiphone\n")
    glossary = Glossary.load(path, ignore_case=True)
    assert glossary.targets("Der HUND mag das iPhone") == ["dog", "iPhone"]


def test_a_case_re_folds_but_casefold_does_not_is_still_named():
    # re matches the dotless i of "kırmızı" with "I"; casefold() keeps "ı" apart from "i".
    glossary = Glossary.of_pairs([("kırmızı", "red"), ("araba", "car")], ignore_case=True)
    assert glossary.targets("KIRMIZI ARABA") == ["red", "car"]


def test_a_thousand_terms_are_found_as_one_by_one():
    words = [f"w{i}x" for i in range(1000)]
    glossary = Glossary.of_pairs([(w, w.upper()) for w in words] + [("w7x w8x", "both")])
    text = "w7x w8x und w999x, w12xy w5x"
    assert glossary.targets(text) == ["both", "W999X", "W5X"]


def test_the_same_term_twice_with_the_same_target_is_kept_once(tmp_path):
    path = glossary_file(tmp_path, "\ufeffHaus\thouse\nHaus\thouse\n  Baum \t tree\n")
    glossary = Glossary.load(path)
    assert [(t.source, t.target) for t in glossary.terms] == [("Haus", "house"), ("Baum", "tree")]
    assert glossary.targets("Haus am Baum, Haus") == ["house", "tree"]


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("Haus\thouse\nBaum tree\n", 2, "no TAB; a glossary line is source term TAB target term"),
        ("Haus\thouse\tHaus\n", 1, "2 TABs; a glossary line is source term TAB target term"),
        ("\thouse\n", 1, "empty source term"),
        ("Haus\t  \n", 1, "empty target term"),
        (  # two files joined with cat: the second one's mark starts a line of the first
            "Hund\tdog\n\ufeffHunde\tpuppies\n",
            2,
            "source term '\\ufeffHunde' holds a byte order mark (U+FEFF), as where two files "
            "were joined; remove it",
        ),
        (
            "Haus\t" + "x" * (MAX_TERM_CHARS + 1) + "\n",
            1,
            f"target term of {MAX_TERM_CHARS + 1} characters; the limit is {MAX_TERM_CHARS} "
            "(a term is a word or a short phrase)",
        ),
        (
            "Haus\thouse\nBaum\ttree\nHaus\thome\n",
            3,
            "source term 'Haus' has target 'home', but {path}:1 gives it 'house': keep one",
        ),
        (b"Haus\thouse\nB\xe4um\ttree\n", 2, "not valid UTF-8 (byte 0xe4 at column 2)"),
        (  # matched alike (whitespace runs as one space): the longer spelling had won
            "New York\tA\nNew  York\tB\n",
            2,
            "source term 'New  York' has target 'B', but {path}:1 gives it 'A': keep one",
        ),
    ],
)
def test_bad_glossary_lines_are_one_line_naming_file_and_line(tmp_path, text, line, message):
    path = glossary_file(tmp_path, text)
    with pytest.raises(TmtError) as err:
        Glossary.load(path)
    assert str(err.value) == f"{path}:{line}: " + message.format(path=path)
    assert "\n" not in str(err.value)


def test_duplicates_differing_in_case_are_refused_when_case_is_ignored(tmp_path):
    path = glossary_file(tmp_path, "Haus\thouse\nhaus\thome\n")
    assert len(Glossary.load(path).terms) == 2
    with pytest.raises(TmtError, match=rf"^{path}:2: source term 'haus' has target 'home'"):
        Glossary.load(path, ignore_case=True)


def test_pairs_are_checked_and_named_by_their_origin():
    glossary = Glossary.of_pairs([("Haus", "house")], origin="request")
    assert glossary.targets("das Haus") == ["house"]
    with pytest.raises(TmtError, match=r"^request:2: empty source term$"):
        Glossary.of_pairs([("Haus", "house"), (" ", "x")], origin="request")
    assert Glossary.of_pairs([]).targets("das Haus") == []


def test_constraints_file_gives_each_line_its_phrases(tmp_path):
    path = tmp_path / "constraints.txt"
    path.write_text("the house\tred\n\n\t  \t\nStraße \n")
    assert list(iter_constraints(path)) == [["the house", "red"], [], [], ["Straße"]]
    path.write_text("ok\n" + "y" * (MAX_TERM_CHARS + 1) + "\n")
    with pytest.raises(TmtError, match=rf"^{path}:2: phrase of {MAX_TERM_CHARS + 1} characters"):
        list(iter_constraints(path))
    path.write_bytes(b"ok\n\xff\n")
    with pytest.raises(TmtError, match=rf"^{path}:2: not valid UTF-8"):
        list(iter_constraints(path))


@pytest.mark.parametrize(
    "term, text, found",
    [
        ("café", "the cafe\u0301 opens", ["T"]),  # decomposed text (macOS), composed term
        ("cafe\u0301", "the café opens", ["T"]),  # and the other way round
        ("cafe", "the cafe\u0301 opens", []),  # the accent is part of the word
        ("iPhone", "my ｉＰｈｏｎｅ is", ["T"]),  # full-width letters
        ("ﬁle", "a file here", ["T"]),  # a ligature
        ("한국", "나는 \u1112\u1161\u11ab\u1100\u116e\u11a8 사람", ["T"]),  # decomposed Hangul
        ("ガム", "ｶﾞﾑ を", ["T"]),  # half-width kana and its voicing mark
    ],
)
def test_terms_and_texts_are_matched_as_the_model_reads_them(term, text, found):
    """In NFKC, as the tokenizer normalises the source: the model reads one word there."""
    assert Glossary.of_pairs([(term, "T")]).targets(text) == found


@pytest.mark.parametrize(
    "term, text, found",
    [
        ("राम", "रामायण एक महाकाव्य है।", []),  # a vowel sign (Mc) goes on the word
        ("राम", "राम घर गया।", ["T"]),
        ("किताब", "किताबें पढ़ो", []),  # a nasal sign (Mn) after the vowel sign
        ("كتابا", "قرأ كتاباً", []),  # Arabic's tanwin (Mn)
        ("خواهم", "می\u200cخواهم", []),  # a zero-width non-joiner inside a Persian word
        ("Hund", "Der Schäfer\u00adhund", []),  # a soft hyphen (&shy;) is no word boundary
        ("Schäferhund", "Der Schäfer\u00adhund bellt", ["T"]),
    ],
)
def test_marks_and_joiners_inside_a_word_are_part_of_it(term, text, found):
    """`re`'s `\\w` holds no combining mark: each of these terms had been found inside a
    longer word (and the last not at all)."""
    assert Glossary.of_pairs([(term, "T")], ignore_case=True).targets(text) == found


def test_kept_characters_are_found_where_normalising_moved_them():
    """`ﬁ` becomes two characters: the kept span after it is still where it was."""
    text = "ﬁ x New York <code>City</code>"
    kept = [(text.index("<code>"), len(text))]
    glossary = Glossary.of_pairs([("New York", "NY"), ("New York <code>City</code>", "NYC")])
    assert glossary.targets(text, kept) == ["NY"]
