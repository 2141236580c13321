"""Documents whose words hold markup and text together, and markup the model must not read:
translated as they are (`fakes.same`), they come back as written."""

from __future__ import annotations

import re

import pytest

from tests.documents.fakes import echo, same
from transformer_mt.documents import html, markdown
from transformer_mt.documents.units import WORD, AlignedText, DocumentError

TRANSLATE = {"html": html.translate_html, "markdown": markdown.translate_markdown}


def translated(format: str, document: str, translate=same) -> str:
    return TRANSLATE[format](document, translate)


@pytest.mark.parametrize(
    "format, document",
    [
        ("html", "<p>Drücke <kbd>Strg</kbd>+<kbd>C</kbd> zum Kopieren.</p>"),
        ("html", "<p>Der <code>git</code>-Befehl hilft.</p>"),
        ("html", "<p>Alle <code>Node</code>s werden gelöscht.</p>"),
        ("html", "<p>Preis: 5<code>EUR</code></p>"),
        ("html", "<p>Siehe <span translate=no>ACME</span>-Produkte hier</p>"),
        ("markdown", "Der `git`-Befehl hilft.\n"),
        ("markdown", "Siehe <https://x.org>-Seite hier\n"),
        ("html", "<p>Rufe <code>foo</code><b>bar</b> auf</p>"),
        ("html", "<p>Rufe <b>bar</b><code>foo</code> auf</p>"),
        ("html", "<p>Rufe <code>foo</code><sup>2</sup> auf</p>"),
        ("markdown", "Siehe `code`[Link](u) hier\n"),
        ("markdown", "Siehe [Link](u)`code` hier\n"),
        ("markdown", "Wort![Bild](a.png)`code` hier\n"),
        ("html", "<p>Wort<img src=x><code>code</code> hier</p>"),
        ("html", "<p>ein hund<wbr>läuft, a<wbr>b<!-- c -->c d</p>"),
    ],
)
def test_text_in_the_same_word_as_kept_markup_is_kept(format, document):
    """A kept element replaces its text in the word the model wrote, not the whole word, and
    the markup beside it in that word goes around its own text: none is lost or doubled."""
    assert translated(format, document) == document


@pytest.mark.parametrize(
    "format, document",
    [
        ("html", "<p>x<sup>2</sup> und H<sub>2</sub>O</p>"),
        ("html", "<p>die <b>Fahrrad</b>s hier</p>"),
        ("markdown", "Fahr*rad*s und **H**2O\n"),
    ],
)
def test_markup_around_part_of_a_word_stays_around_that_part(format, document):
    assert translated(format, document) == document


def same_words(texts):
    """Each text as it is, word i aligned to word i, words as placement counts them (a
    character of Japanese is one)."""
    return [
        AlignedText(text, tuple((i, i) for i in range(len(WORD.findall(text))))) for text in texts
    ]


@pytest.mark.parametrize(
    "format, document",
    [
        ("html", "<p>彼は医者です。私は<b>学生</b>です！</p>"),
        ("html", "<p>これは<code>git</code>です。</p>"),
        ("html", "<p>私は<a href=x>医者</a>です。彼は学生です。</p>"),
        ("markdown", "彼は医者です。私は**学生**です！\n"),
        ("markdown", "他说：“快跑！”然后`走`了。\n"),
    ],
)
def test_markup_in_japanese_and_chinese_goes_around_its_own_characters(format, document):
    """No spaces between words: each character is one, so markup around a word of one
    sentence does not spread over the paragraph, and code keeps the text around it."""
    assert translated(format, document, same_words) == document


def test_markup_in_a_japanese_sentence_goes_around_the_translation_of_its_characters():
    # 彼0 は1 医2 者3 で4 す5 。6 私7 は8 学9 生10 で11 す12 ！13 -> He is a doctor. I am a student!
    pairs = ((0, 0), (2, 3), (3, 3), (4, 1), (7, 4), (9, 7), (10, 7), (11, 5))
    english = [AlignedText("He is a doctor. I am a student!", pairs)]
    out = translated("html", "<p>彼は医者です。私は<b>学生</b>です！</p>", lambda texts: english)
    assert out == "<p>He is a doctor. I am a <b>student</b>!</p>"


def test_a_kept_text_the_model_changed_still_replaces_its_words():
    upper = [AlignedText("DER GIT-BEFEHL HILFT.", ((0, 0), (1, 1), (2, 2)))]
    out = translated("html", "<p>Der <code>git</code>-Befehl hilft.</p>", lambda texts: upper)
    assert out == "<p>DER <code>git</code> HILFT.</p>"  # the element as written, once


def test_markup_without_text_in_a_changed_word_goes_before_it():
    """Where the translation of the word no longer starts with the text before the image, the
    image goes before the word: after it, the kept element after it lost its word and wrote
    its text a second time."""
    upper = [AlignedText("WORTCODE HIER", ((0, 0), (1, 1)))]
    out = translated("markdown", "Wort![Bild](a.png)`code` hier\n", lambda texts: upper)
    assert out == "![Bild](a.png)`code` HIER\n"


def translated_and_read(document: str) -> tuple[str, list[str]]:
    """An HTML `document` translated as it is, and the texts the model was given."""
    seen: list[str] = []

    def reading(texts):
        seen.extend(texts)
        return same(texts)

    return translated("html", document, reading), seen


def test_a_script_inside_kept_markup_is_not_read_by_the_model():
    document = '<p>Siehe <span translate=no>ACME<script>track("x")</script></span> hier</p>'
    assert translated_and_read(document) == (document, ["Siehe ACME hier"])


@pytest.mark.parametrize(
    "document",
    [
        "<script><!--\nalert(1);\n//--></script><p>Hallo Welt</p>",
        "<style><!-- p { color: red } --></style><p>Hallo Welt</p>",
        '<script type="text/template"><div class="x">y</div></script><p>Hallo</p>',
        "<textarea><b>fett</textarea><p>Hallo</p>",
        "<textarea></div></textarea><p>Hallo</p>",
        "<xmp><b>a</xmp><iframe><p>b</iframe><p>Hallo</p>",
    ],
)
def test_raw_text_elements_hold_text_not_markup(document):
    """As browsers read them, whatever Python's html.parser reads by itself."""
    assert translated("html", document) == document


def test_a_title_holds_text_and_references_not_markup():
    """As browsers read it: `<b>` in a title is text, `&amp;` the character it names."""
    out, seen = translated_and_read("<title>A <b> B &amp; C</title><p>Hallo</p>")
    assert out == "<title>A &lt;b> B &amp; C</title><p>Hallo</p>"
    assert seen == ["A <b> B & C", "Hallo"]
    out, seen = translated_and_read("<title>&amp;<b> x</title>")  # markup after a reference
    assert (out, seen) == ("<title>&amp;&lt;b> x</title>", ["&<b> x"])
    with pytest.raises(DocumentError, match="^line 1, column 10: &#1; refers to a control"):
        translated("html", "<title>a &#1;</title>")


@pytest.mark.parametrize(
    "reference", ["&#1;", "&#x7F;", "&#x0B;", "&#xFFFE;", "&#x8D;", "&#x81;", "&#x9D;"]
)
def test_a_reference_to_a_control_character_is_refused_where_it_stands(reference):
    with pytest.raises(DocumentError) as refused:
        translated("html", f"<p>a\nb {reference}c</p>")
    message = str(refused.value)
    assert message.startswith(f"line 2, column 3: {reference} refers to a control"), message


def test_punctuation_moved_out_of_a_link_does_not_make_it_an_image():
    def answer(texts):  # "Siehe [Hallo](u) Welt": Hallo -> "!a", punctuation the source lacks
        return [AlignedText("see !a b", ((0, 0), (1, 1), (2, 2)))]

    out = translated("markdown", "Siehe [Hallo](http://x) Welt\n", answer)
    assert out == "see \\![a](http://x) b\n"


@pytest.mark.parametrize(
    "format, document",
    [
        ("html", "<p><img src=x> Ein Text</p>"),
        ("html", "<p>Ein Text <img src=x></p>"),
        ("html", "<p><label>Name <input></label></p>"),
        ("markdown", "![Bild](a.png) Ein Text\n"),
        ("markdown", "Ein Text ![Bild](a.png)\n"),
    ],
)
def test_markup_without_text_at_a_units_edge_keeps_its_space(format, document):
    """The block's own markup around it is no word for it to stick to."""
    assert translated(format, document) == document


@pytest.mark.parametrize(
    "document",
    [
        '<p><i class="fa fa-check"></i> Erledigt</p>',
        '<p>Klicke <i class="icon"></i> hier, <span class="x"></span>dort</p>',
        "<p>A <b></b> B <b><i></i></b></p>",
        '<p><a href=x><img src=y alt="Logo"></a> Text hier</p>',
        '<p><a id="top"></a>Titel und <a href=x><b>Text</b><img src=y></a> hier</p>',
    ],
)
def test_an_element_without_text_keeps_the_whitespace_around_it(document):
    """An icon font's `<i></i>` or a linked image is markup without text, as an image is: it
    touches the word it touched in the source, and no other."""
    assert translated("html", document) == document


@pytest.mark.parametrize("comment", ["<!-->", "<!--->"])
def test_an_empty_comment_closed_early_ends_where_it_starts(comment):
    document = f"<p>a {comment} c</p><p>b --></p>"
    assert translated("html", document, echo) == f"<p>A {comment} C</p><p>B --></p>"


def test_an_end_tag_br_is_a_line_break_as_browsers_read_it():
    document = "<p>eins zwei</br>drei vier</p>"
    assert translated("html", document, echo) == "<p>EINS ZWEI</br>DREI VIER</p>"


def test_an_image_in_a_link_keeps_the_space_before_the_text_after_the_link():
    """Looking through the link's tags, the image stands apart from `Text`: the space stays
    between them (inside the link, where the image is written as a word of its own)."""
    out = translated("html", '<p><a href=x><img src=y alt="Logo"></a> Text hier</p>')
    assert re.sub(r"<[^>]*>", "", out) == " Text hier"
    assert '<img src=y alt="Logo">' in out and out.count("</a>") == 1
