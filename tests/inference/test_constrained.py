"""Constrained translation through `Translator` and `tmt translate`: each line's phrases and
its sentences' glossary terms appear in the output, other lines translate as without, the beam
widens for many constraints, and what cannot fit is refused naming the line."""

import dataclasses
import itertools
import re

import pytest

from transformer_mt.cli import main
from transformer_mt.inference.constrained import ConstraintsError, in_sentence_ids
from transformer_mt.inference.glossary import Glossary
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator

LINES = [
    "ein mann fährt rad",
    "zwei hunde spielen im schnee",
    "",
    "eine frau liest das buch",
    "das buch",
]


@pytest.fixture(scope="module")
def translator(checkpoint):
    return Translator.from_checkpoint(str(checkpoint), beam_size=3, n_best=2)


def has_word(text: str, phrase: str) -> bool:
    """`phrase` in `text`, starting at a word start (the subwords of a constraint start one)."""
    return re.search(rf"(?<!\w){re.escape(phrase)}", text) is not None


def test_every_translation_holds_its_lines_phrases_and_other_lines_are_unchanged(translator):
    constraints = [["frau liest"], [], [], ["schnee", "rad"], []]
    constrained = translator.translate(Texts.of(LINES, constraints=constraints))
    plain = translator.translate(LINES)
    for phrases, got, alone in zip(constraints, constrained, plain, strict=True):
        assert len(got.texts) == 2
        if phrases:
            assert all(has_word(got.texts[0], p) for p in phrases), (phrases, got.texts)
        else:
            assert_same(got, alone)


def test_glossary_terms_of_each_sentence_become_its_constraints(translator):
    glossary = Glossary.of_pairs([("hunde", "frau"), ("Buch", "schnee"), ("rad", "rad")], True)
    found = translator.translate(Texts.of(LINES, glossary=glossary))
    as_phrases = translator.translate(
        Texts.of(LINES, constraints=[["rad"], ["frau"], [], ["schnee"], ["schnee"]])
    )
    assert [t.texts for t in found] == [t.texts for t in as_phrases]
    # A line of two sentences is still split; each sentence gets its own terms.
    first, second = "Zwei hunde spielen im schnee.", "Das buch."
    assert len(translator.split([f"{first} {second}"], [translator.default]).sentences) == 2
    (joined,) = translator.translate(Texts.of([f"{first} {second}"], glossary=glossary))
    sentences = translator.translate(Texts.of([first, second], glossary=glossary))
    assert joined.texts[0] == " ".join(t.texts[0] for t in sentences)


def test_a_line_with_more_constraints_than_the_beam_is_searched_with_a_wider_one(checkpoint):
    narrow = Translator.from_checkpoint(str(checkpoint), beam_size=2)
    phrases = ["mann", "hunde", "buch", "schnee"]
    found = narrow.translate(Texts.of(LINES, constraints=[phrases, [], [], [], ["rad"]]))
    assert all(has_word(found[0].texts[0], p) for p in phrases)
    wide = Translator.from_checkpoint(str(checkpoint), beam_size=5)
    assert_same(found[0], wide.translate(Texts.of(LINES[:1], constraints=[phrases]))[0])
    assert_same(found[1], narrow.translate(LINES[1:2])[0])


def assert_same(got, expected) -> None:
    """The same translations, scores equal up to the float noise of batch composition."""
    assert got.texts == expected.texts
    assert got.scores == pytest.approx(expected.scores, abs=1e-5)


def test_int8_translator_meets_constraints(checkpoint):
    int8 = Translator.from_checkpoint(str(checkpoint), quantize="int8", beam_size=3)
    found = int8.translate(Texts.of(LINES, constraints=[["liest das"], ["rad"], [], [], ["mann"]]))
    assert has_word(found[0].texts[0], "liest das") and has_word(found[1].texts[0], "rad")
    assert has_word(found[4].texts[0], "mann")


def test_constraints_that_cannot_fit_are_refused_naming_the_line(translator):
    words = ("mann", "hunde", "buch", "schnee", "frau", "rad", "im")
    many = [f"{a} {b}" for a, b in itertools.permutations(words, 2)]  # 42 phrases
    with pytest.raises(ConstraintsError) as err:
        translator.translate(Texts.of(LINES, constraints=[[], [], [], many, []]))
    assert err.value.line == 3
    assert re.match(r"line 4: its constraints take \d\d+ target tokens; with its", str(err.value))
    assert str(err.value).endswith("the model has room for 63")
    with pytest.raises(ConstraintsError, match="^line 2: target phrase '漢字' has characters"):
        translator.translate(Texts.of(LINES, constraints=[[], ["漢字"], [], [], []]))
    # Invisible characters alone encode to no piece: met before it starts, the term was lost.
    glossary = Glossary.of_pairs([("mann", "\u200b")])
    for request in (
        Texts.of(LINES, constraints=[[], ["\u200b"], [], [], []]),
        Texts.of(LINES, glossaries=[glossary] * len(LINES)),
    ):
        with pytest.raises(ConstraintsError, match=r"^line \d: target phrase '\\u200b.*' has no "):
            translator.translate(request)


LONG_PREFIX = "mann hunde buch " * 30  # about 90 target tokens; the model has room for 63


def test_a_forced_prefix_longer_than_the_position_table_is_refused_naming_the_line(translator):
    with pytest.raises(ConstraintsError) as err:
        translator.translate(Texts.of(LINES[:2], prefixes=["", LONG_PREFIX]))
    assert (err.value.line, err.value.field) == (1, "prefix")
    assert re.fullmatch(
        r"line 2: its forced prefix takes \d\d+ target tokens; the model has room for 63",
        str(err.value),
    )
    # Scoring a target reads it as a prefix too: cut to the table, as a long source is.
    assert len(translator.encoding.prefix_ids(LONG_PREFIX)) == 63


def test_cli_refuses_a_forced_prefix_too_long_in_one_line(checkpoint, tmp_path, capsys):
    """Named by the line of the --prefix file that holds it."""
    source, prefixes = tmp_path / "in.txt", tmp_path / "prefixes.txt"
    source.write_text("\n".join(LINES[:2]) + "\n")
    prefixes.write_text(f"ein\n{LONG_PREFIX}\n")
    args = ["--input", source, "--output", tmp_path / "out.txt", "--prefix", prefixes]
    assert translate(checkpoint, *args) == 2
    assert re.fullmatch(
        rf"error: {prefixes}:2: its forced prefix takes \d+ target tokens; the model has room "
        "for 63",
        capsys.readouterr().err.splitlines()[-1],
    )
    assert not (tmp_path / "out.txt").exists()


def test_forced_text_the_model_cannot_produce_is_refused_naming_its_line(checkpoint):
    """Forced anyway, a prefix of characters the vocabulary lacks came out as ' ⁇ ', and a
    piece the model never produces (as the back-translation tag) gave NaN scores."""
    plain = Translator.from_checkpoint(str(checkpoint), beam_size=2)
    with pytest.raises(ConstraintsError, match="^line 2: its forced prefix '漢字' has characters"):
        plain.translate(Texts.of(["das buch", "ein mann"], prefixes=["", "漢字"]))
    tagged = Translator.from_checkpoint(str(checkpoint), beam_size=2)
    rad = tagged.tgt_tokenizer.encode("rad")
    specials = tagged.encoding.specials
    tagged.encoding.specials = dataclasses.replace(specials, never=(*specials.never, *rad))
    never = "holds " + ", ".join(repr(tagged.tgt_tokenizer.id_to_piece(i)) for i in rad)
    with pytest.raises(ConstraintsError, match=f"^line 1: its forced prefix 'rad' {never}, a "):
        tagged.translate(Texts.of(["das buch"], prefixes=["rad"]))
    with pytest.raises(ConstraintsError, match=f"^line 1: target phrase 'rad' {never}, a piece"):
        tagged.translate(Texts.of(["das buch"], constraints=[["rad"]]))


def test_a_blank_line_given_a_prefix_or_phrases_stays_blank_and_is_counted(
    checkpoint, tmp_path, capsys
):
    """A prefix file made for every line of a text with blank lines between paragraphs is
    common: its blank lines' prefixes go unused, said once on stderr."""
    fresh = Translator.from_checkpoint(str(checkpoint), beam_size=2)
    found = fresh.translate(
        Texts.of(["", " ", "das buch"], prefixes=["das", "", ""], constraints=[[], ["rad"], []])
    )
    assert [t.texts for t in found][:2] == [[""], [""]] and fresh.unforced_lines == 2
    source, prefix = tmp_path / "in.txt", tmp_path / "prefix.txt"
    source.write_text("das buch\n\nein mann\n", encoding="utf-8")
    prefix.write_text("the\nthe\nthe\n", encoding="utf-8")
    capsys.readouterr()
    assert translate(checkpoint, "--input", source, "--prefix", prefix) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[1] == ""
    assert "warning: 1 blank line(s) had a --prefix or --constraints line, unused" in err


def translate(checkpoint, *args):
    return main(["translate", "--checkpoint", str(checkpoint), *map(str, args)])


def test_cli_glossary_and_constraints_files(checkpoint, tmp_path, capsys, translator):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n")
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("HUNDE\tfrau\nbuch\tschnee\n")
    constraints = tmp_path / "phrases.txt"
    constraints.write_text("rad\tmann\n\n\n\n\n")
    out = tmp_path / "out.txt"
    args = ["--input", source, "--output", out, "--beam-size", 3, "--nbest", 2]
    extra = ["--glossary", glossary, "--glossary-ignore-case", "--constraints", constraints]
    assert translate(checkpoint, *args, *extra) == 0
    expected = translator.translate(
        Texts.of(
            LINES,
            constraints=[["rad", "mann"], [], [], [], []],
            glossary=Glossary.load(glossary, ignore_case=True),
        )
    )
    listed = [
        f"{i} ||| {text} ||| {score:.4f}"
        for i, t in enumerate(expected)
        for text, score in zip(t.texts, t.scores, strict=True)
    ]
    assert out.read_text().splitlines() == listed
    # Refusals: one line each, naming the file and line.
    constraints.write_text("rad\n")
    capsys.readouterr()
    assert translate(checkpoint, "--input", source, "--constraints", constraints) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {constraints}: 1 constraint line(s) for the 5 line(s) of {source}: give one "
        "line of phrases (blank for none) per input line"
    )
    constraints.write_text("\n\n\n\n漢字\n")
    args = ["--input", source, "--output", out, "--constraints", constraints]
    assert translate(checkpoint, *args) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {constraints}:5: target phrase '漢字' has characters the target vocabulary lacks"
    )
    glossary.write_text("buch\t漢字\n")  # a glossary's terms are checked first, by its line
    assert translate(checkpoint, *args, "--glossary", glossary) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"error: {glossary}:1: target")
    glossary.write_text("hunde\tfrau\nbuch schnee\n")
    assert translate(checkpoint, "--input", source, "--output", out, "--glossary", glossary) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {glossary}:2: no TAB; a glossary line is source term TAB target term"
    )


@pytest.mark.parametrize("fmt", ["text", "html"])
def test_a_glossary_target_the_model_cannot_produce_names_the_glossary_line(
    checkpoint, tmp_path, capsys, fmt
):
    """It named the input line where the term matched (a document's unit number), and a term
    no sentence held was never checked."""
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("mann\tman\nkatze\t漢字\n", encoding="utf-8")
    source = tmp_path / ("in.html" if fmt == "html" else "in.txt")
    source.write_text("<p>ein hund</p>\n" if fmt == "html" else "ein hund\n", encoding="utf-8")
    args = ["translate", "--checkpoint", str(checkpoint), "--input", str(source)]
    assert main([*args, "--glossary", str(glossary), "--format", fmt]) == 2
    assert capsys.readouterr().err.endswith(
        f"error: {glossary}:2: target phrase '漢字' has characters the target vocabulary lacks\n"
    )


@pytest.mark.parametrize("phrase", ["医者", "東京", "学生です"])
def test_a_japanese_phrase_is_encoded_as_it_reads_inside_a_sentence(japanese_tokenizer, phrase):
    """Encoded alone, "医者" starts with a word mark, which decodes as a space inside a
    Japanese sentence: `私は 医者です。`."""
    tokenizer = japanese_tokenizer
    alone, inside = tokenizer.encode(phrase), in_sentence_ids(tokenizer, phrase)
    assert tokenizer.id_to_piece(alone[0]).startswith("\u2581")
    assert not tokenizer.id_to_piece(inside[0]).startswith("\u2581")
    assert tokenizer.decode(tokenizer.encode("私は") + inside) == f"私は{phrase}"
    assert tokenizer.decode(inside) == phrase


def test_a_phrase_written_with_spaces_keeps_its_word_start(translator):
    tokenizer = translator.tgt_tokenizer
    assert in_sentence_ids(tokenizer, "dog") == tokenizer.encode("dog")


def test_a_japanese_name_into_english_is_a_word_of_its_own(japanese_tokenizer):
    """Into English, "田中" keeps its word mark (a space before it in "Mr 田中"); only into a
    language written without spaces is it encoded as inside a sentence."""
    from transformer_mt.data.specials import OWN_SPECIALS
    from transformer_mt.inference.constrained import phrase_ids

    tokenizer, phrase = japanese_tokenizer, "医者"
    english = phrase_ids(tokenizer, [phrase], 100, OWN_SPECIALS, 0, unspaced=False)
    japanese = phrase_ids(tokenizer, [phrase], 100, OWN_SPECIALS, 0, unspaced=True)
    assert english == [tokenizer.encode(phrase)] and japanese == [
        in_sentence_ids(tokenizer, phrase)
    ]
    assert english != japanese


def test_a_target_of_no_known_language_encodes_by_the_phrases_script(japanese_tokenizer):
    """An imported model's `tgt` placeholder (or OPUS-MT's `jap`) names no language we know
    to write without spaces: the phrase's own script decides, as `writes_without_spaces`
    says nothing."""
    from transformer_mt.data.specials import OWN_SPECIALS
    from transformer_mt.inference.constrained import phrase_ids
    from transformer_mt.writing_systems import writes_without_spaces

    assert writes_without_spaces("tgt") is None and writes_without_spaces("ROMANCE") is None
    assert writes_without_spaces("jap") is True and writes_without_spaces("en") is False
    found = phrase_ids(japanese_tokenizer, ["医者"], 100, OWN_SPECIALS, 0, unspaced=None)
    assert found == [in_sentence_ids(japanese_tokenizer, "医者")]


def test_a_thai_phrase_is_spelled_as_inside_a_thai_sentence(tmp_path):
    """Thai writes words without spaces too: encoded as a word of its own, the phrase's first
    piece had been the word-start mark, and the translation read "ฉันรัก แมว"."""
    import sentencepiece as spm

    from transformer_mt.data.specials import OWN_SPECIALS
    from transformer_mt.data.tokenizer import Tokenizer
    from transformer_mt.inference.constrained import phrase_ids
    from transformer_mt.writing_systems import writes_without_spaces

    lines = ["ฉันรักแมว", "แมวกินข้าว", "เด็กเล่นฟุตบอลในสวน", "ฉันอ่านหนังสือ"]
    (tmp_path / "th.txt").write_text("\n".join(lines * 50) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "th.txt"), model_prefix=str(tmp_path / "th"), vocab_size=60,
        character_coverage=1.0, model_type="bpe", pad_id=0, unk_id=1, bos_id=2, eos_id=3,
    )  # fmt: skip
    tokenizer = Tokenizer.load(tmp_path / "th.model")
    assert writes_without_spaces("th") is True
    (ids,) = phrase_ids(tokenizer, ["แมว"], 100, OWN_SPECIALS, 0, unspaced=True)
    assert tokenizer.decode(tokenizer.encode("ฉันรัก") + ids) == "ฉันรักแมว"
    (unknown,) = phrase_ids(tokenizer, ["แมว"], 100, OWN_SPECIALS, 0, unspaced=None)
    assert unknown == ids  # a target of no known language: the phrase's script tells
