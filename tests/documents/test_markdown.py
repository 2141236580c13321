"""Markdown documents: every construct kept in order, code and other blocks byte for byte, each
unit's text the translation of that text alone, translated words that cannot become syntax."""

import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from transformer_mt.documents.markdown import regions, translate_markdown
from transformer_mt.documents.markdown_parser import MarkdownMissing
from transformer_mt.documents.translate import translate_document
from transformer_mt.documents.units import AlignedText

from .fakes import echo, same, saying
from .test_html import is_subsequence, kept_texts, outside

GUIDE = Path(__file__).with_name("guide.md")
TEXT = ("text", "text_special", "softbreak")


def constructs(document: str) -> list[tuple]:
    """Every block token and every inline token but text, with what says how it was written:
    markers, fence info, link and image targets, code span and inline HTML contents."""
    found = []
    for token in MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(document):
        if token.type != "inline":
            found.append((token.type, token.markup, token.info, token.content, token.attrs))
            continue
        for child in token.children:
            if child.type not in TEXT:
                content = child.content if child.type in ("code_inline", "html_inline") else ""
                found.append((child.type, child.markup, content, child.attrs))
    return found


def test_the_guide_keeps_every_construct_and_translates_each_unit_as_alone(translator):
    source = GUIDE.read_text(encoding="utf-8")
    out = translate_document(translator, source, "markdown")
    assert out != source
    assert constructs(out) == constructs(source)
    for start, end in [
        ("```python", "```\n\n"),
        ("    eingerückt", "\n"),
        ('<div class="note">', "</div>\n"),
        ("---\n\n[buch]", "buch\n"),
        ("|:---------|", "|\n"),
        ("`das_buch()`", " "),
        ("![schnee]", ")"),
        ("<https://", ">"),
    ]:
        at = source.index(start)
        assert source[at : source.index(end, at + len(start)) + len(end)] in out
    assert out.startswith("# ") and out.split("\n")[0].endswith(" #")
    before, after = regions(source), regions(out)
    assert len(before) == len(after)
    for old, new in zip(before, after, strict=True):
        alone = translator.translate([old.unit.text])[0].texts[0].split()
        kept = kept_texts(old.unit)
        assert kept_texts(new.unit) == kept
        if kept:
            assert is_subsequence(outside(new.unit.text, kept), alone), (old.unit.text, alone)
        else:
            assert new.unit.text.split() == alone, old.unit.text


def test_a_cell_or_line_of_numbers_and_symbols_stays_as_written():
    source = "| Jahr | Zeit |\n|---|---|\n| 2024 | 12:30 |\n\n* * *\n\n- **3** €\n- ein hund\n"
    assert translate_markdown(source, saying("a caption")) == (
        "| a caption | a caption |\n|---|---|\n| 2024 | 12:30 |\n\n* * *\n\n- **3** €\n"
        "- a caption\n"
    )


def test_markup_is_spliced_into_the_source_as_written():
    source = (
        "Ein *mann* fährt [rad](<a b.html> 'x')\\\n  zwei __hunde__\r\n"
        "\r\n"
        "> im `schnee`\r\n"
        "> heute\r\n"
    )
    assert translate_markdown(source, echo) == (
        "EIN *MANN* FÄHRT [RAD](<a b.html> 'x')\\\n  ZWEI __HUNDE__\r\n\r\n> IM `schnee` HEUTE\r\n"
    )


def test_a_table_keeps_its_pipes_and_a_pipe_in_a_cell_stays_escaped():
    source = "| a \\| b | c |\n|---|--:|\n|  d  | *e* |\n"
    assert translate_markdown(source, echo) == "| A \\| B | C |\n|---|--:|\n|  D  | *E* |\n"


@pytest.mark.parametrize("translation", ["1. *a* [b] `c` # d_e | f <g> ~h~ \\", "- x", "# y"])
def test_translated_words_never_become_syntax(translation):
    for source in ("ein **mann** fährt\n", "| ein |\n|---|\n| mann |\n"):
        out = translate_markdown(source, saying(translation))
        assert [t[0] for t in constructs(out)] == [t[0] for t in constructs(source)]
        texts = [r.unit.text for r in regions(out)]
        assert texts[-1] == translation


def test_an_empty_document_and_one_without_text():
    assert translate_markdown("", echo) == ""
    source = "```\nein mann\n```\n\n---\n"
    assert translate_markdown(source, echo) == source


def test_without_markdown_it_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "markdown_it", None)
    with pytest.raises(MarkdownMissing, match=r"pip install 'transformer_mt\[documents\]'"):
        translate_markdown("ein mann", echo)


@pytest.mark.parametrize(
    "source",
    [
        "ein hund  \nläuft schnell\n",
        "ein hund\\\nläuft schnell\n",
        "ein hund    \r\nläuft schnell\r\n",
        "> ein hund  \n> läuft schnell\n",
        "- ein hund  \n  läuft schnell\n",
        "ein *hund  \nläuft* schnell\n",
        "ein [hund\\\nläuft](U) schnell\n",
    ],
)
def test_a_hard_line_break_keeps_the_sentence_one_unit(source):
    """The model reads the sentence whole; the break (and the next line's `>` or indentation)
    comes back between the words it stood between."""
    assert [r.unit.text for r in regions(source)] == ["ein hund läuft schnell"]
    out = translate_markdown(source, echo)
    assert out == source.upper()
    assert constructs(out) == constructs(source)


@pytest.mark.parametrize("br", ["<br>", "<br />", "<BR/>", "</br>", " <br> ", "<br>\n"])
def test_an_inline_html_line_break_is_whitespace_to_the_model(br):
    """As in HTML documents: `hund<br>läuft` is two words, and the break stays between them
    (a newline after it is the model's whitespace, written as a space or not at all)."""
    source = f"ein hund{br}läuft schnell\n"
    assert [r.unit.text for r in regions(source)] == ["ein hund läuft schnell"]
    assert translate_markdown(source, echo) == f"EIN HUND{br.rstrip(chr(10))}LÄUFT SCHNELL\n"


@pytest.mark.parametrize("word", ["-", "+", "#", ">", "=", "1.", "2)"])
def test_a_word_after_a_hard_line_break_never_starts_a_block(word):
    source = "ein hund  \nläuft schnell\n"
    out = translate_markdown(source, saying(f"a dog {word} runs"))
    assert [t[0] for t in constructs(out)] == [t[0] for t in constructs(source)]
    assert [r.unit.text for r in regions(out)] == [f"a dog {word} runs"]


@pytest.mark.parametrize(
    "front",
    [
        "---\ntitle: Ein Titel\ntags: [a, b]\n---\n",
        "---\r\ntitle: x\r\n...\r\n",
        '+++\ntitle = "Ein Titel"\n+++\n',
        "---\n---\n",
    ],
)
def test_front_matter_is_kept_as_written_and_not_read(front):
    document = front + "# Hallo Welt\n\nText hier.\n"
    assert translate_markdown(document, echo) == front + "# HALLO WELT\n\nTEXT HIER.\n"
    assert [region.unit.text for region in regions(document)] == ["Hallo Welt", "Text hier."]


def test_a_thematic_break_first_is_not_front_matter():
    document = "---\n\nText a\n\n---\n"
    assert translate_markdown(document, echo) == "---\n\nTEXT A\n\n---\n"


@pytest.mark.parametrize("space", ["\xa0", "\u3000"])
def test_a_paragraph_whose_first_line_is_unicode_whitespace(space):
    """markdown-it trims that line away: the text is found on the line that holds it."""
    assert translate_markdown(f"{space}\nzwei Worte\n", echo) == f"{space}\nZWEI WORTE\n"


def test_footnote_references_are_written_as_they_are():
    document = "Text[^1] hier.\n\n[^1]: Die Fußnote.\n"
    assert translate_markdown(document, same) == document


def test_an_ampersand_that_would_start_a_character_reference_is_escaped():
    out = translate_markdown("x\n", saying("&lt;b&gt; und &#60; & Co"))
    assert out == "\\&lt;b\\&gt; und \\&#60; & Co\n"
    assert MarkdownIt().render(out) == "<p>&amp;lt;b&amp;gt; und &amp;#60; &amp; Co</p>\n"


@pytest.mark.parametrize(
    ("translation", "expected"),
    [
        ("That is more.", "That is more[^1].\n"),
        ("That is more", "That is more[^1]\n"),  # the translation lost the full stop
        ("That is more?", "That is more[^1]?\n"),
    ],
)
def test_a_reference_between_a_word_and_its_punctuation_stays_there(translation, expected):
    """It had gone before the translated word (`[^1]more.`): the target word does not start
    with the source word's text, `mehr`."""
    assert translate_markdown("Das ist mehr[^1].\n", saying(translation)) == expected
    assert translate_markdown("Das ist mehr[^1].\n", echo) == "DAS IST MEHR[^1].\n"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (  # a reference after a sentence, its definition a paragraph of its own
            "Ein Hund läuft.[^1]\n\n[^1]: Eine Katze schläft.\n",
            "EIN HUND LÄUFT.[^1]\n\n[^1]: EINE KATZE SCHLÄFT.\n",
        ),
        (  # definitions in a row, each on its own line, after a line of text
            "Siehe[^a] dort.\n\nVorher\n[^a]: Erste hier.\n[^note]: Zweite.\n",
            "SIEHE[^a] DORT.\n\nVORHER\n[^a]: ERSTE HIER.\n[^note]: ZWEITE.\n",
        ),
    ],
)
def test_footnote_references_and_labels_are_kept_as_written(source, expected):
    """GitHub's footnotes, which CommonMark reads as text: the labels went to the model, which
    dropped them, and definitions in a row ran into one line."""
    assert translate_markdown(source, echo) == expected
    assert all("[^" not in r.unit.text for r in regions(source))  # the model never reads them


@pytest.mark.parametrize("definition", ["haus", "https://example.com/hunde"])
def test_a_one_word_footnote_definition_is_no_link_definition(definition):
    """CommonMark reads `[^1]: haus` as a link reference definition: the reference in the
    text became a link whose label `^1` was sent to the model, and the reference was lost."""
    source = f"ein mann geht[^1] im park\n\n[^1]: {definition}\n"
    assert translate_markdown(source, same) == source
    assert [r.unit.text for r in regions(source)] == ["ein mann geht im park", definition]
    link = "ein [haus][1] geht\n\n[1]: https://example.com/haus\n"  # a link's stays one
    assert translate_markdown(link, echo) == "EIN [HAUS][1] GEHT\n\n[1]: https://example.com/haus\n"


@pytest.mark.parametrize("label", ["[^a*b*c]", "[^x`y`]", "[^_n_]", "[^**]"])
def test_a_footnote_label_holding_emphasis_or_code_delimiters_is_kept_whole(label):
    """markdown-it's emphasis and code span rules had cut the label (`[^a*b*c]` became
    `[^abc]` beside an emphasis): the model read it, and the reference was lost."""
    source = f"Ein Mann geht{label} im Park.\n\n{label}: Eine *Notiz*.\n"
    assert [r.unit.text for r in regions(source)] == ["Ein Mann geht im Park.", "Eine Notiz."]
    assert translate_markdown(source, same) == source
    assert translate_markdown(source, echo) == (
        f"EIN MANN GEHT{label} IM PARK.\n\n{label}: EINE *NOTIZ*.\n"
    )


def test_a_footnote_label_before_a_link_destination_is_a_link():
    source = "ein [^1](https://example.com) mann\n"
    assert [r.unit.text for r in regions(source)] == ["ein ^1 mann"]
    assert translate_markdown(source, same) == source


@pytest.mark.parametrize("escaped", ["\\[^1\\]", "&#91;^1&#93;", "\\[^1]"])
def test_an_escaped_footnote_reference_stays_text(escaped):
    """Its escapes had been dropped, and it came out as a real reference."""
    source = f"ein mann {escaped} geht\n"
    assert [r.unit.text for r in regions(source)] == ["ein mann [^1] geht"]
    out = translate_markdown(source, same)
    assert "[^1]" not in out and MarkdownIt().render(out) == MarkdownIt().render(source)


def test_each_footnote_definition_on_a_line_of_its_own_is_a_unit():
    """Translated with the paragraph above it, its text was placed across the paragraph's
    by attention, and its label could land inside a line, no longer a definition."""
    source = "Ein Mann fährt.\n[^1]: Eine Frau liest.\n[^2]: Ein Hund.\n"
    assert [r.unit.text for r in regions(source)] == [
        "Ein Mann fährt.",
        "Eine Frau liest.",
        "Ein Hund.",
    ]
    assert translate_markdown(source, saying("A b.")) == "A b.\n[^1]: A b.\n[^2]: A b.\n"


def scripted(translation: str, *pairs: tuple[int, int]):
    """A translator that answers `translation` to every text, its words aligned by `pairs`
    (source word, target word)."""
    return lambda texts: [AlignedText(translation, pairs) for _ in texts]


@pytest.mark.parametrize(
    ("link", "expected"),
    [
        ("[Hund][]", "A [dog][Hund] runs."),
        ("[Hund]", "A [dog][Hund] runs."),
        ("[*Hund*]", "A [*dog*][*Hund*] runs."),
        ("[Hund\nda]", "A [dog runs][Hund da]."),  # its line end a space: written on one line
    ],
)
def test_a_shortcut_or_collapsed_reference_link_keeps_its_label(link, expected):
    """Its text is its label: the translated text (`[dog][]`) named no definition, and the
    link was text."""
    definitions = "[Hund]: /hund\n[*Hund*]: /stark\n[Hund da]: /da\n"
    source = f"Ein {link} läuft.\n\n{definitions}"
    out = translate_markdown(source, saying("A dog runs."))
    assert out == f"{expected}\n\n{definitions}"
    assert constructs(out) == constructs(source)


@pytest.mark.parametrize("label", ["[^2]", "[^a*b*c]"])
def test_a_link_whose_text_holds_a_footnote_reference_is_a_link(label):
    """markdown-it's search for the end of the link text met the reference read whole and
    refused the link as nested: its URL went to the model."""
    source = f"Ein Hund und [eine Katze{label}](https://x.org) schläft.\n\n{label}: Zwei.\n"
    assert [r.unit.text for r in regions(source)] == ["Ein Hund und eine Katze schläft.", "Zwei."]
    assert translate_markdown(source, same) == source


@pytest.mark.parametrize("end", ["\r", "\r\n"])
def test_every_line_end_markdown_it_reads_is_one_and_stays_as_written(end):
    """markdown-it reads "\\r" as a line end: split at "\\n" only, a document with "\\r" line
    ends had fewer lines than it read (an IndexError), and a stray one hid the text."""
    lf = "---\ntitle: x\n---\n# Ein Hund\n\nEin Mann\n*fährt*  \nRad.\n\n- Ein Hund\n- Katze\n"
    source = lf.replace("\n", end)
    assert translate_markdown(source, echo) == translate_markdown(lf, echo).replace("\n", end)
    broken = f"ein hund  {end}läuft schnell{end}"  # a word after a hard break is escaped
    assert translate_markdown(broken, saying("a dog - runs")) == f"a dog  {end}\\- runs{end}"
    stray = "Ein Hund läuft.\rEine Katze.\n\n# Hallo\n"
    assert translate_markdown(stray, echo) == "EIN HUND LÄUFT. EINE KATZE.\n\n# HALLO\n"


def test_a_code_span_first_inside_strong_emphasis_keeps_it_strong():
    """A code span with no aligned word is a word of its own; first inside the emphasis, its
    space goes after it: `** `Fahrrad`and**` is no emphasis, and the next word lost its
    space."""
    source = "Ein Mann fährt **`Fahrrad`** und *_Auto_*.\n"
    pairs = ((0, 0), (1, 1), (2, 2), (2, 3), (4, 4), (5, 5))
    out = translate_markdown(source, scripted("A man is riding and car.", *pairs))
    assert out == "A man is riding **`Fahrrad` and** *_car_*.\n"
    assert constructs(out) == constructs(source)


def test_a_hard_break_stays_between_words_where_emphasis_before_it_took_the_last():
    """The emphasis, aligned to a word before the break and to the last one, left no word
    after the break: it went last, ending the paragraph (placement rule 6: between two)."""
    source = "Ein Mann fährt *Fahrrad*.  \nZweite Zeile.\n"
    pairs = ((0, 0), (1, 1), (2, 2), (2, 3), (3, 5), (3, 9), (4, 6), (4, 7), (5, 8), (5, 9))
    out = translate_markdown(
        source, scripted("A man is riding a bike. A person is running.", *pairs)
    )
    assert out == "A man is riding a *bike*. A person is  \nrunning.\n"
    assert constructs(out) == constructs(source)


@pytest.mark.parametrize("before", ["", "Vorher\n", "Vorher.\n\n"])
def test_a_footnote_definition_keeps_its_label_first_whatever_the_alignment(before):
    """The label went before the translation of the first source word, wherever that was
    aligned (`A dog [^2]: runs.`): no longer a definition, and `[^2]` pointed at nothing."""
    source = f"{before}[^2]: Ein Hund läuft.\n"
    out = translate_markdown(source, scripted("A dog runs.", (0, 2), (1, 1), (2, 0)))
    assert out.endswith("\n[^2]: A dog runs.\n" if before else "[^2]: A dog runs.\n")


@pytest.mark.parametrize(
    ("element", "read"),
    [
        ("<kbd>Strg</kbd>", "Strg"),
        ("<code>*Strg*</code>", "Strg"),
        ('<span translate="no">Strg</span>', "Strg"),
        ("<script>Strg</script>", ""),  # kept whole, its text never read
    ],
)
def test_inline_html_kept_in_html_documents_is_kept_in_markdown(element, read):
    """As in HTML documents (and as code spans): the element is written as it is in place of
    its text's translation. Its tags were kept beside the words as markup without text, and
    its text was translated and moved: `<kbd></kbd><kbd>green shirt.</kbd>`."""
    source = f"Drücke {element} jetzt.\n"
    assert [r.unit.text for r in regions(source)] == [" ".join(f"Drücke {read} jetzt.".split())]
    out = translate_markdown(source, echo)
    assert out == f"DRÜCKE {element} JETZT.\n"
    assert constructs(out) == constructs(source)
    keys = "Drücke <kbd>Strg</kbd>+<kbd>C</kbd> jetzt.\n"  # one word: each around its text
    assert translate_markdown(keys, same) == keys


def test_inline_html_placed_in_html_documents_goes_around_its_words_in_markdown():
    """`<b>` ... `</b>` is one element placed around the aligned target words, as emphasis
    is: its tags, kept each beside a word, had come out empty (`A car <b></b>red`)."""
    source = "Ein <b>roter Wagen</b> fährt *weg*.\n"
    assert [r.unit.text for r in regions(source)] == ["Ein roter Wagen fährt weg."]
    pairs = ((0, 0), (1, 2), (2, 1), (3, 3), (4, 4))
    out = translate_markdown(source, scripted("A car red drives off.", *pairs))
    assert out == "A <b>car red</b> drives *off*.\n"
    crossing = "Ein <b>roter *Wagen</b> fährt* weg.\n"  # no element: tags beside their words
    assert translate_markdown(crossing, echo) == crossing.upper().replace("B>", "b>")


@pytest.mark.parametrize(
    "source",
    ["[![Bild](a.png)](https://example.org) Ein Hund\n", "Ein *![Bild](a.png)* Hund\n"],
)
def test_markup_around_an_image_keeps_the_space_after_it(source):
    """A link or emphasis around no text is markup without text, kept whole beside the word
    it touches: the linked image stuck to the word after it (`](https://example.org)Ein`)."""
    assert translate_markdown(source, same) == source


@pytest.mark.parametrize("source", ["*ein\n[^1]: hund*\n", "[ein\n[^1]: hund](u)\n"])
def test_a_footnote_label_inside_emphasis_or_a_link_does_not_cut_the_unit(source):
    """Cut there, each unit held markup never closed: `ValueError: markup left open`."""
    out = translate_markdown(source, echo)
    assert out == source.upper().replace("\n[", " [").replace("(U)", "(u)")
    assert constructs(out) == constructs(source)
