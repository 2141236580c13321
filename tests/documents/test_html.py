"""HTML documents: every tag kept in order, kept parts byte for byte, each unit's text the
translation of that text alone, and one-line errors for what does not parse."""

from html.parser import HTMLParser
from pathlib import Path

import pytest

from transformer_mt.documents.html import regions, translate_html
from transformer_mt.documents.translate import translate_document
from transformer_mt.documents.units import DocumentError, Kept

from .fakes import echo, saying

PAGE = Path(__file__).with_name("page.html")


class _Tags(HTMLParser):
    """Every tag, comment and declaration of a document in order, start tags as written."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found = []

    def handle_starttag(self, tag, attrs):
        self.found.append(("start", self.get_starttag_text()))

    def handle_startendtag(self, tag, attrs):
        self.found.append(("start", self.get_starttag_text()))

    def handle_endtag(self, tag):
        self.found.append(("end", tag))

    def handle_comment(self, data):
        self.found.append(("comment", data))

    def handle_decl(self, decl):
        self.found.append(("decl", decl))


def tags(document: str) -> list[tuple[str, str]]:
    parser = _Tags()
    parser.feed(document)
    parser.close()
    return parser.found


def kept_texts(unit) -> list[str]:
    return [unit.text[i.start : i.end] for i in _all(unit.inlines) if isinstance(i, Kept)]


def _all(inlines):
    for inline in inlines:
        yield inline
        yield from getattr(inline, "children", ())


def outside(text: str, kept: list[str]) -> list[str]:
    for part in filter(None, kept):
        text = text.replace(part, " ")
    return text.split()


def is_subsequence(words: list[str], of: list[str]) -> bool:
    rest = iter(of)
    return all(word in rest for word in words)


def test_the_page_keeps_its_markup_and_translates_each_unit_as_alone(translator):
    source = PAGE.read_text(encoding="utf-8")
    out = translate_document(translator, source, "html")
    assert out != source
    # tags in order, attributes and quoting as written; the root's lang the target's
    assert tags(out) == tags(source.replace('<html lang="de">', '<html lang="en">'))
    written = source.replace('<html lang="de">', '<html lang="en">')
    for start, end in [
        ("<script>", "</script>"),
        ("<style>", "</style>"),
        ("<pre>", "</pre>"),
        ('<p translate="no">', "</p>"),
        ('<span translate="no">', "</span>"),
        ("<code>", "</code>"),
        ("<!DOCTYPE", "<title>"),
        ("<img", ">"),
    ]:
        at = written.index(start)
        assert written[at : written.index(end, at) + len(end)] in out
    before, after = regions(source), regions(out)  # the output parses
    assert len(before) == len(after)
    for old, new in zip(before, after, strict=True):
        if not old.unit.translatable:
            assert new.unit == old.unit
            continue
        alone = translator.translate([old.unit.text])[0].texts[0].split()
        kept = kept_texts(old.unit)
        assert kept_texts(new.unit) == kept
        if kept:  # its text replaced the words aligned to it
            assert is_subsequence(outside(new.unit.text, kept), alone), (old.unit.text, alone)
        else:
            assert new.unit.text.split() == alone, old.unit.text


def test_translated_text_is_escaped_and_keeps_the_references_the_page_wrote():
    source = '<p title="a &amp; b">fish &amp; chips &copy; 2024 &#8212; &lt;ok&gt;</p>'
    out = translate_html(source, echo)
    assert out == '<p title="a &amp; b">FISH &amp; CHIPS &copy; 2024 &#8212; &lt;OK&gt;</p>'
    assert translate_html("<p>a</p>", saying("<b> & c")) == "<p>&lt;b> &amp; c</p>"


def test_a_cell_of_numbers_and_symbols_stays_as_written_with_its_markup():
    """A model wrote a caption for each ("2024" -> "There are two men are walking down.")."""
    source = (
        "<table><tr><td>2024</td><td>12<b>:</b>30</td><td>🐕 <i>½</i></td><td>ein hund</td>"
        "<td><b>5</b> hunde</td></tr></table>"
    )
    assert translate_html(source, saying("a caption")) == (
        "<table><tr><td>2024</td><td>12<b>:</b>30</td><td>🐕 <i>½</i></td><td>a caption</td>"
        "<td><b>a</b> caption</td></tr></table>"
    )


def test_a_fragment_is_translated_as_it_stands():
    assert translate_html("ein <i>mann</i><br>zwei", echo) == "EIN <i>MANN</i><br>ZWEI"
    assert translate_html("", echo) == ""


def test_end_tags_html_lets_authors_leave_out_are_understood():
    source = "<ul><li>ein mann<li>zwei <b>hunde</b></ul><table><tr><td>a<td>b</table><p>c<p>d"
    assert [r.unit.text for r in regions(source)] == ["ein mann", "zwei hunde", "a", "b", "c", "d"]
    assert translate_html(source, echo) == (
        "<ul><li>EIN MANN<li>ZWEI <b>HUNDE</b></ul><table><tr><td>A<td>B</table><p>C<p>D"
    )


def test_an_inline_element_around_a_block_stays_where_it_is():
    source = "<b>ein mann<div>fährt</div>rad</b>"
    assert translate_html(source, echo) == "<b>EIN MANN<div>FÄHRT</div>RAD</b>"


@pytest.mark.parametrize(
    "source, message",
    [
        (
            "<p><b>x<i>y</b></i></p>",
            "line 1, column 12: </b> closes <i> of line 1, column 8, which needs its own end "
            "tag first",
        ),
        ("<p>x</span></p>", "line 1, column 5: </span> closes nothing: no <span> is open"),
        ("<div>\n<p>x</p>", "line 1, column 1: <div> is never closed"),
        ("<p>x</p>\n<!-- y", "line 2, column 1: markup '<!-- y' never ends"),
        ("<p>x <b class='y'", "line 1, column 6: markup \"<b class='y'\" never ends"),
        ("<script>if (a < b) x", "line 1, column 1: <script> is never closed"),
    ],
)
def test_a_document_that_does_not_parse_is_one_line_naming_where(source, message):
    with pytest.raises(DocumentError) as caught:
        translate_html(source, echo)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "tag",
    ["<br>", "<br/>", "<BR />", "<br>\n", " <br> ", "<wbr>", " <img src=x.png> ", " <input> "],
)
def test_a_void_inline_element_inside_a_sentence_keeps_the_sentence_one_unit(tag):
    """A line break is whitespace to the model (`hund<br>läuft`: two words), a `<wbr>` no
    whitespace (one word), an image or an input a word's neighbour."""
    source = f"<p>ein hund{tag}läuft schnell</p>"
    text = "ein hundläuft schnell" if tag == "<wbr>" else "ein hund läuft schnell"
    assert [r.unit.text for r in regions(source)] == [text]
    expected = f"<p>EIN HUND{tag.rstrip()}LÄUFT SCHNELL</p>"
    if tag.startswith(" "):
        expected = f"<p>EIN HUND{tag}LÄUFT SCHNELL</p>"
    if tag == "<wbr>":  # inside a word whose translation lacks "hund": before it
        expected = "<p>EIN <wbr>HUNDLÄUFT SCHNELL</p>"
    assert translate_html(source, echo) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            '<p>ein hund <img src="x.png"></img> läuft</p>',
            '<p>EIN HUND <img src="x.png"></img> LÄUFT</p>',
        ),
        ("<p>ein hund</input> läuft</p>", "<p>EIN HUND</input> LÄUFT</p>"),
    ],
)
def test_the_end_tag_of_a_void_element_is_kept_as_browsers_pass_it_over(source, expected):
    """It had been refused: `</img> closes nothing`."""
    assert [r.unit.text for r in regions(source)] == ["ein hund läuft"]
    assert translate_html(source, echo) == expected


def test_a_stray_paragraph_end_is_an_empty_paragraph_as_browsers_read_it():
    """`<p><div>..</div></p>` (a `<div>` ends the paragraph, so the `</p>` closes nothing) is
    common in pages a CMS wrote; it had refused the whole page."""
    source = "<p>ein hund<div>läuft schnell</div></p>\n<p>ein mann</p>"
    units = [r.unit.text for r in regions(source) if r.unit.text]
    assert units == ["ein hund", "läuft schnell", "ein mann"]
    expected = "<p>EIN HUND<div>LÄUFT SCHNELL</div></p>\n<p>EIN MANN</p>"
    assert translate_html(source, echo) == expected
    assert translate_html("</p>x", echo) == "</p>X"


@pytest.mark.parametrize(
    "graphic",
    [
        '<svg viewBox="0 0 1 1"><title>Speichern</title><path d="M0"/></svg>',
        "<math><mi>x</mi></math>",
    ],
)
def test_an_inline_icon_or_formula_keeps_the_sentence_one_unit(graphic):
    """It had been a block boundary: the sentence cut in two, each half translated alone."""
    source = f"<p>ein hund {graphic} läuft</p>"
    assert [r.unit.text for r in regions(source)] == ["ein hund läuft"]  # its text never read
    assert translate_html(source, echo) == f"<p>EIN HUND {graphic} LÄUFT</p>"


def test_an_image_between_a_word_and_its_punctuation_stays_there():
    source = '<p>ein hund läuft<img src="x.png">.</p>'
    assert translate_html(source, echo) == '<p>EIN HUND LÄUFT<img src="x.png">.</p>'
    assert translate_html(source, saying("a dog runs")) == '<p>a dog runs<img src="x.png"></p>'


@pytest.mark.parametrize("tag", ['<span class="icon"/>', '<i class="fa"/>', "<b/>", "<code/>"])
def test_a_self_closing_inline_tag_keeps_the_sentence_one_unit(tag):
    """Read as a block boundary, it cut the sentence in two, each half translated alone."""
    source = f"<p>ein {tag} hund läuft schnell</p>"
    assert [r.unit.text for r in regions(source)] == ["ein hund läuft schnell"]
    assert translate_html(source, echo) == f"<p>EIN {tag} HUND LÄUFT SCHNELL</p>"


def test_a_line_break_between_blocks_or_at_a_units_edge_stays_there():
    source = "<p>ein hund</p><br><p><br>läuft <b>schnell<br></b></p>"
    units = [r.unit for r in regions(source)]
    assert [u.text for u in units if u.translatable] == ["ein hund", "läuft schnell"]
    out = translate_html(source, saying("schnell läuft"))
    assert out == "<p>schnell läuft</p><br><p><br>schnell <b>läuft<br></b></p>"


@pytest.mark.parametrize(
    "root, expected",
    [
        ('<html lang="de">', '<html lang="en-GB">'),
        ("<html lang='de' xml:lang='de'>", "<html lang='en-GB' xml:lang='en-GB'>"),
        ("<HTML\n  Lang=de class=x>", "<HTML\n  Lang=en-GB class=x>"),
        (
            '<html data-lang="de" title="lang=de" lang="">',
            '<html data-lang="de" title="lang=de" lang="en-GB">',
        ),
        ("<html>", "<html>"),
        (
            '<!DOCTYPE html>\n<!-- lang="de" --><html lang="de">',
            '<!DOCTYPE html>\n<!-- lang="de" --><html lang="en-GB">',
        ),
    ],
)
def test_the_root_lang_becomes_the_target_language(root, expected):
    body = '<body><p lang="fr">ein hund</p></body></html>'
    out = translate_html(root + body, echo, "en_GB")
    assert out == expected + '<body><p lang="fr">EIN HUND</p></body></html>'


@pytest.mark.parametrize(
    "source, target, expected",
    [
        # An Arabic page into English had stayed laid out right to left, and the other way.
        ('<html lang="ar" dir="rtl"><p>x</p>', "en", '<html lang="en" dir="ltr"><p>X</p>'),
        ("<html DIR='LTR' lang=de><p>x</p>", "ar", "<html DIR='rtl' lang=ar><p>X</p>"),
        ('<html lang="de" dir="ltr"><p>x</p>', "pa_Arab", '<html lang="pa-Arab" dir="rtl"><p>X</p>'
         ),
        ('<html lang="de" dir="auto"><p>x</p>', "he", '<html lang="he" dir="auto"><p>X</p>'),
        ('<html lang="de"><p dir="ltr">x</p>', "he", '<html lang="he"><p dir="ltr">X</p>'),
        # A passage in the source language, relabelled: its dir too.
        ('<p lang="de" dir="ltr">x</p>', "fa", '<p lang="fa" dir="rtl">X</p>'),
    ],
)  # fmt: skip
def test_a_dir_with_the_lang_becomes_the_target_languages_way(source, target, expected):
    assert translate_html(source, echo, target, "de") == expected


@pytest.mark.parametrize(
    "source, language",
    [
        ('<div lang="de"><p>ein</p></div>', "en"),  # not <html>
        ('<p>ein</p><html lang="de">', "en"),  # not the first start tag
        ('<html lang="de"><p>ein</p>', None),  # no target language known
    ],
)
def test_lang_outside_the_root_or_without_a_target_stays(source, language):
    assert translate_html(source, echo, language) == source.replace("ein", "EIN")


@pytest.mark.parametrize(
    "source, expected",
    [
        # Arabic in a German page: kept, with its lang and dir (it had been "translated").
        (
            '<p>ein hund <span lang="ar" dir="rtl">مرحبا بالعالم</span> läuft</p>',
            '<p>EIN HUND <span lang="ar" dir="rtl">مرحبا بالعالم</span> LÄUFT</p>',
        ),
        ('<blockquote lang="fr"><p>bonjour</p></blockquote>', None),  # a block: kept whole
        # German under another spelling of the source language: translated, lang the target.
        ('<p lang="de-AT">ein hund</p><p lang="deu_Latn">zwei</p>',
         '<p lang="en">EIN HUND</p><p lang="en">ZWEI</p>'),
    ],
)  # fmt: skip
def test_a_passage_in_another_language_than_the_source_is_kept(source, expected):
    assert translate_html(source, echo, "en", "de") == (expected or source)


@pytest.mark.parametrize(
    "source, language, expected",
    [
        # The root's lang is the page's (a CMS default, say): the page is still translated.
        ('<html lang="fr"><p>ein hund</p></html>', "de", '<html lang="en"><p>EIN HUND</p></html>'),
        # Kept markup keeps the lang of what it holds.
        ('<div translate="no"><p lang="de">ein hund</p></div>', "de", None),
        ('<p lang="fr">x <span lang="de">ein hund</span></p>', "de", None),
        # A model of no one source language (an imported `mul` or `ROMANCE`) keeps nothing.
        ('<p lang="fr">ein hund</p>', "mul", '<p lang="en">EIN HUND</p>'),
        ('<p lang="fr">ein hund</p>', "ROMANCE", '<p lang="en">EIN HUND</p>'),
    ],
)  # fmt: skip
def test_the_roots_lang_and_kept_markup_and_unknown_sources(source, language, expected):
    assert translate_html(source, echo, "en", language) == (expected or source)
