"""Placing inline markup around aligned target words, with scripted alignments
(placement.py), and translating the regions of a document (units.py)."""

import random

import pytest

from transformer_mt.documents.placement import render
from transformer_mt.documents.units import (
    AlignedText,
    Region,
    UnitBuilder,
    translate_regions,
)

from .fakes import echo


def build(*parts):
    """A unit from text (str), ("open", markup), ("close", markup), ("kept", source, text) and
    ("mark", source, attach) parts; spans may be empty unless opened with ("open!", markup)."""
    builder = UnitBuilder()
    for part in parts:
        if isinstance(part, str):
            builder.text(part)
        elif part[0] in ("open", "open!"):
            builder.open(part[1], may_be_empty=part[0] == "open")
        elif part[0] == "close":
            builder.close(part[1])
        elif part[0] == "kept":
            builder.kept(part[1], part[2])
        else:
            builder.kept(part[1], "", part[2])
    return builder.build()


def placed(unit, text, *pairs):
    return render(unit, AlignedText(text, pairs), str)


B = (("open", "<b>"), ("close", "</b>"))


def test_the_model_reads_the_text_with_whitespace_runs_as_one_space():
    unit = build("  the \n", ("open", "<b>"), " red  ", ("close", "</b>"), "car ")
    assert unit.text == "the red car"
    assert unit.words == [(0, 3), (4, 7), (8, 11)]


def test_an_element_goes_around_the_words_aligned_to_its_words():
    unit = build("the ", B[0], "red", B[1], " car")
    out = placed(unit, "la voiture rouge", (0, 0), (1, 2), (2, 1))
    assert out == "la voiture <b>rouge</b>"


def test_punctuation_the_source_element_lacks_is_written_outside_it():
    unit = build("in ", B[0], "snow", B[1], "; ", B[0], "(x)", B[1], " ", B[0], "c", B[1])
    out = placed(unit, "im (Schnee), (x) ...", (0, 0), (1, 1), (2, 2), (3, 3))
    assert out == "im (<b>Schnee</b>), <b>(x)</b> <b>...</b>"


def test_a_nested_element_stays_inside_its_parent():
    unit = build(("open", "<a>"), "the ", B[0], "red", B[1], " car", ("close", "</a>"), " today")
    out = placed(unit, "aujourd'hui la voiture rouge", (0, 1), (1, 3), (2, 2), (3, 0))
    assert out == "aujourd'hui <a>la voiture <b>rouge</b></a>"


def test_siblings_keep_their_source_order_over_the_alignment():
    """Swapped words: the tags stay in their order (the documented fallback), one word each."""
    unit = build(B[0], "red", B[1], " ", ("open", "<i>"), "car", ("close", "</i>"))
    out = placed(unit, "voiture rouge", (0, 1), (1, 0))
    assert out == "<b>voiture</b> <i>rouge</i>"


def test_an_element_without_aligned_words_takes_the_free_word_after_its_neighbour():
    unit = build("a ", B[0], "b", B[1], " c")
    assert placed(unit, "x y z", (0, 0), (2, 2)) == "x <b>y</b> z"
    assert placed(unit, "x y z", (0, 1), (2, 2)) == "x y <b>z</b>"


def test_with_no_word_left_html_keeps_an_empty_element_and_markdown_drops_emphasis():
    """Two elements, one target word: the later one keeps it (the earlier gave it up to leave
    one for it), the earlier is written around no word, or dropped."""
    html = build(B[0], "a", B[1], " ", ("open", "<i>"), "b", ("close", "</i>"))
    markdown = build(
        ("open!", "**"), "a", ("close", "**"), " ", ("open!", "_"), "b", ("close", "_")
    )
    assert placed(html, "x", (0, 0)) == "<b></b><i>x</i>"
    assert placed(markdown, "x", (0, 0)) == "_x_"
    assert placed(html, "") == "<b></b><i></i>"
    assert placed(markdown, "") == ""


def test_kept_markup_replaces_the_words_aligned_to_its_text():
    unit = build("call ", ("kept", "<code>f()</code>", "f()"), " now")
    out = placed(unit, "ruf f() jetzt an", (0, 0), (0, 3), (1, 1), (2, 2))
    assert out == "ruf <code>f()</code> jetzt an"


def test_kept_markup_replaces_only_its_longest_run_of_aligned_words():
    unit = build("call ", ("kept", "<code>f()</code>", "f()"), " now")
    out = placed(unit, "a b c d", (0, 0), (1, 1), (1, 3), (2, 2))
    assert out == "a <code>f()</code> c d"
    name = build("see ", ("kept", "<code>x</code>", "x"))
    assert placed(name, "a (b.", (0, 0), (1, 1)) == "a (<code>x</code>."


def test_kept_markup_with_no_aligned_word_is_a_word_of_its_own():
    unit = build("call ", ("kept", "<code>f()</code>", "f()"), " now")
    assert placed(unit, "ruf jetzt", (0, 0), (2, 1)) == "ruf <code>f()</code> jetzt"
    first = build(("kept", "<code>f()</code>", "f()"), " now")
    assert placed(first, "jetzt", (1, 0)) == "<code>f()</code> jetzt"


@pytest.mark.parametrize(
    "attach, expected",
    [("next", "<x>ceci voir"), ("previous", "ceci voir<x>"), ("apart", "ceci voir <x>")],
)
def test_markup_without_text_sticks_to_the_word_it_touches(attach, expected):
    unit = build("see ", ("mark", "<x>", attach), "this")
    assert placed(unit, "ceci voir", (0, 1), (1, 0)) == expected


def test_translated_words_go_through_the_escape_and_markup_does_not():
    unit = build("a ", B[0], "b", B[1])
    out = render(unit, AlignedText("<x> &", ((0, 0), (1, 1))), lambda word: f"[{word}]")
    assert out == "[<x>] <b>[&]</b>"


def test_a_unit_of_kept_markup_only_is_not_translated():
    assert not build(("kept", "<code>x y</code>", "x y")).translatable
    assert build(("kept", "<code>x</code>", "x"), " y").translatable


def test_translatable_is_a_word_outside_every_kept_element_on_random_units():
    """The lookup among kept starts agrees with the definition, word by word against every
    kept element, on units of words, kept code, marks and spans in random order."""
    rng = random.Random(0)
    parts = [
        "a ", "b", " c ", ("kept", "<code>x</code>", "x"), ("kept", "<code>y z</code>", "y z"),
        ("mark", "<img>", "previous"), ("mark", "<br>", "apart"),
    ]  # fmt: skip
    for _ in range(300):
        chosen = [rng.choice(parts) for _ in range(rng.randint(1, 8))]
        if rng.random() < 0.3:
            chosen = [B[0], *chosen, B[1]]
        unit = build(*chosen)
        kept = [(k.start, k.end) for k in unit.kept]
        definition = any(not any(a <= s and e <= b for a, b in kept) for s, e in unit.words)
        assert unit.translatable == definition, chosen


def test_translate_regions_replaces_each_unit_and_keeps_the_rest():
    document = "<p>a <b>b</b></p><pre>c</pre><p><code>d</code></p>"
    regions = [
        Region(3, 13, build("a ", B[0], "b", B[1])),
        Region(34, 50, build(("kept", "<code>d</code>", "d"))),
    ]
    out = translate_regions(document, regions, echo, lambda u, t: render(u, t, str))
    assert out == "<p>A <b>B</b></p><pre>c</pre><p><code>d</code></p>"


BR = ("break", "<br>")


def build_with_breaks(*parts):
    """`build`, where ("break", source) is a line break (`UnitBuilder.kept(line_break=True)`)."""
    builder = UnitBuilder()
    for part in parts:
        if isinstance(part, str):
            builder.text(part)
        elif part[0] == "break":
            builder.kept(part[1], "", "previous", line_break=True)
        elif part[0] == "open":
            builder.open(part[1], may_be_empty=True)
        else:
            builder.close(part[1])
    return builder.build()


def test_a_line_break_is_whitespace_to_the_model_and_no_end_of_the_unit():
    unit = build_with_breaks("ein hund", BR, "läuft")
    assert unit.text == "ein hund läuft" and unit.kept[0].line_break
    assert placed(unit, "a dog runs", (0, 0), (1, 1), (2, 2)) == "a dog<br>runs"


@pytest.mark.parametrize(
    "parts, translation, pairs, expected",
    [
        # aligned after the last word: moved back between two words
        (("a b", BR, "c"), "C B A", ((0, 2), (1, 1), (2, 0)), "C B<br>A"),
        # before the first (the word before it unaligned): moved after it
        (("a", BR, "b c"), "B C A", ((1, 0), (2, 1)), "B<br>C A"),
        # inside a span: stays inside it, between two of its words
        (
            ("x ", ("open", "<b>"), "a", BR, "b", ("close", "</b>")),
            "B A X",
            ((0, 2), (1, 1), (2, 0)),
            "<b>B<br>A</b> X",
        ),
        # first or last in the source: stays so
        ((BR, "a b"), "B A", ((0, 1), (1, 0)), "<br>B A"),
        (("a b", BR), "B A", ((0, 1), (1, 0)), "B A<br>"),
        (
            ("x ", ("open", "<b>"), BR, "a", ("close", "</b>")),
            "A X",
            ((0, 1), (1, 0)),
            "<b><br>A</b> X",
        ),
        # one target word: nothing to be between
        (("a", BR, "b"), "AB", ((0, 0), (1, 0)), "AB<br>"),
    ],
)
def test_a_line_break_stays_between_words_on_the_sides_it_had_words(
    parts, translation, pairs, expected
):
    assert placed(build_with_breaks(*parts), translation, *pairs) == expected


@pytest.mark.parametrize("depth", [1, 50, 20_000])
def test_nesting_depth_does_not_matter_to_placement(depth):
    """Placing and writing walk a loop: 20,000 nested spans place as one does."""
    parts = [("open", "<b>")] * depth + ["a b"] + [("close", "</b>")] * depth
    unit = build_with_breaks("x ", *parts, " y")
    out = placed(unit, "Y B A X", (0, 3), (1, 2), (2, 1), (3, 0))
    assert out == "Y " + "<b>" * depth + "B A" + "</b>" * depth + " X"
