"""Hostile documents: links markdown-it would not render, markup nested thousands deep, control
characters. Each is translated with its markup as written, or refused in one line that names
where (units.DocumentError), never a traceback."""

import pytest
from markdown_it import MarkdownIt

from transformer_mt.documents.html import translate_html
from transformer_mt.documents.markdown import translate_markdown
from transformer_mt.documents.markdown_parser import MAX_NESTING
from transformer_mt.documents.units import DocumentError

from .fakes import echo

TRANSLATE = {"html": translate_html, "markdown": translate_markdown}


# --- destinations markdown-it refuses to render (javascript:, vbscript:, file:, data:) -------


@pytest.mark.parametrize(
    "source, expected",
    [
        ("ein [klick](javascript:alert(1)) hier", "EIN [KLICK](javascript:alert(1)) HIER"),
        ("ein [klick](JavaScript:alert(1) 'ti tel') hier", None),
        ("ein ![bild](javascript:alert(1)) hier", "EIN ![bild](javascript:alert(1)) HIER"),
        ("ein <javascript:alert(1)> hier", "EIN <javascript:alert(1)> HIER"),
        ("ein [klick](vbscript:msgbox) hier", "EIN [KLICK](vbscript:msgbox) HIER"),
        ("ein [klick](file:///etc/passwd) hier", "EIN [KLICK](file:///etc/passwd) HIER"),
        ("ein [klick](data:text/html,x) hier", "EIN [KLICK](data:text/html,x) HIER"),
        ("ein [klick][r] hier\n\n[r]: javascript:alert(1)", None),
        ("*ein [klick](javascript:x) hier*", "*EIN [KLICK](javascript:x) HIER*"),
    ],
)
def test_a_link_markdown_it_would_not_render_keeps_its_markup(source, expected):
    """The splice copies a destination as written, so none is refused: the link's markup is
    the source's, only its text translated (the URL and title are no words of the unit)."""
    out = translate_markdown(source + "\n", echo)
    if expected is not None:
        assert out == expected + "\n"
    assert _links(out) == _links(source) and len(_links(source)) == 1
    assert "\\[" not in out  # not escaped as text


def _links(document: str) -> list[tuple]:
    """Each link, image and autolink with its destination, by a parser that refuses none."""
    parser = MarkdownIt("commonmark")
    parser.validateLink = lambda url: True
    found = []
    for token in parser.parse(document):
        for child in token.children or ():
            if child.type in ("link_open", "image"):
                target = child.attrs.get("href", child.attrs.get("src"))
                found.append((child.type, child.markup, target))
    return found


# --- nesting --------------------------------------------------------------------------------

DEPTH = 10_000


@pytest.mark.parametrize(
    "format, source",
    [
        ("html", "<p>" + "<b>" * DEPTH + "ein hund" + "</b>" * DEPTH + "</p>"),
        ("html", "<p>" + "<b>ein " * 2000 + "hund" + "</b>" * 2000 + "</p>"),
        ("html", "<div>" * DEPTH + "ein <i>hund</i>" + "</div>" * DEPTH),
        ("html", "<p>" + "<span><a href=x>" * 3000 + "ein" + "</a></span>" * 3000),
        ("html", "<ul>" + "<li><ul>" * 3000 + "<li>ein<br>hund" + "</ul>" * 3001),
        ("markdown", "*" * DEPTH + "ein hund" + "*" * DEPTH),
        ("markdown", "*ein " * 2000 + "hund" + "*" * 2000),
        ("markdown", "~~_ein " * 1000 + "hund" + "_~~" * 1000),
        ("markdown", ">" * (MAX_NESTING - 1) + " ein *hund*"),
        ("markdown", "".join("  " * i + "- ein\n" for i in range(MAX_NESTING // 2 - 1))),
        ("markdown", "> - " * (MAX_NESTING // 3) + "ein  \n" + "  " * (MAX_NESTING // 3) + "hund"),
    ],
    ids=[
        "html-b",
        "html-b-words",
        "html-div",
        "html-span-a",
        "html-lists",
        "md-strong",
        "md-em-words",
        "md-strike-em",
        "md-quotes",
        "md-lists",
        "md-quote-list",
    ],
)
def test_deep_nesting_translates_with_its_markup_as_written(format, source):
    """No recursion over the depth: the text is translated and every character of markup
    kept (echo upper-cases the words and aligns each to itself, so the output is the source
    with the text outside its tags upper-cased)."""
    expected = _upper_text(source) if format == "html" else source.upper()
    assert TRANSLATE[format](source, echo) == expected


def test_deep_kept_markup_and_brackets_stay_as_written():
    code = "<code>" * DEPTH + "f()" + "</code>" * DEPTH
    assert translate_html(f"<p>ein {code} hund</p>", echo) == f"<p>EIN {code} HUND</p>"
    brackets = "[" * DEPTH + "ein" + "](u)" * DEPTH
    out = translate_markdown(brackets, echo)
    assert _links(out) == _links(brackets) == [("link_open", "", "u")]
    assert out.count("EIN") == 1  # the unit is one word: the link goes around all of it


def _upper_text(document: str) -> str:
    """`document` with the text outside its tags upper-cased (its tags have no `>` inside)."""
    parts = document.replace(">", ">\0").split("\0")
    return "".join(
        part[: part.index("<")].upper() + part[part.index("<") :] if "<" in part else part.upper()
        for part in parts
    )


@pytest.mark.parametrize(
    "source, line",
    [
        (">" * MAX_NESTING + " ein hund\n", 1),
        (">" * DEPTH + " ein hund\n", 1),
        ("ein\n\n" + "".join("  " * i + "- ein\n" for i in range(500)), MAX_NESTING // 2 + 2),
        ("ein\n" + "> - " * DEPTH + "ein\n", 2),
        ("1. ein\n" + "".join("   " * i + "1. ein\n" for i in range(1, 200)), MAX_NESTING // 2),
    ],
    ids=["quote-at-limit", "quote-deep", "list", "quote-list", "ordered"],
)
def test_markdown_nested_deeper_than_markdown_it_reads_is_refused_naming_the_line(source, line):
    """markdown-it stops reading at MAX_NESTING levels and would leave the rest untranslated
    (its recursion is what stops there); refused instead, at the first line it would skip."""
    with pytest.raises(DocumentError) as caught:
        translate_markdown(source, echo)
    assert (caught.value.line, caught.value.column) == (line, 1)
    assert caught.value.reason == (
        f"block quotes and lists nested {MAX_NESTING} levels deep (a list and its item count "
        "2): markdown-it reads no deeper"
    )


# --- control characters ---------------------------------------------------------------------

CONTROL = ["\x00", "\x01", "\x08", "\x0b", "\x0e", "\x1b", "\x7f", "\x85", "\x9f"]


@pytest.mark.parametrize("char", CONTROL)
@pytest.mark.parametrize(
    "format, template, line, column",
    [
        ("html", "<p>ein hund</p>\n<p>zwei {} katzen</p>\n", 2, 9),
        ("html", "<p>ein hund</p>\n<!-- {} -->\n", 2, 6),
        ("html", '<p title="{}">ein hund</p>', 1, 11),
        ("markdown", "# ein hund\n\nzwei {} katzen\n", 3, 6),
        ("markdown", "ein hund\n\n```\n{}\n```\n", 4, 1),
        ("markdown", "ein [hund](u{})\n", 1, 13),
    ],
    ids=["html-text", "html-comment", "html-attribute", "md-text", "md-code", "md-link"],
)
def test_a_control_character_is_refused_naming_line_column_and_code_point(
    format, template, line, column, char
):
    with pytest.raises(DocumentError) as caught:
        TRANSLATE[format](template.format(char), echo)
    error = caught.value
    assert (error.line, error.column) == (line, column)
    assert error.reason == f"U+{ord(char):04X} is a control character, not text: remove it"


@pytest.mark.parametrize("format", ["html", "markdown"])
def test_a_lone_surrogate_is_refused_too(format):
    with pytest.raises(DocumentError, match=r"^line 1, column 5: U\+D800 is a lone surrogate"):
        TRANSLATE[format]("ein \ud800 hund", echo)


@pytest.mark.parametrize(
    "format, source, expected",
    [
        ("html", "<p>ein\thund\x0cläuft</p>\r\n", "<p>EIN HUND LÄUFT</p>\r\n"),
        ("markdown", "ein\thund\x0cläuft\r\n", "EIN HUND LÄUFT\r\n"),
        ("markdown", "ein hund\u2028läuft\n", "EIN HUND LÄUFT\n"),
    ],
)
def test_the_whitespace_controls_of_html_and_commonmark_translate(format, source, expected):
    assert TRANSLATE[format](source, echo) == expected
