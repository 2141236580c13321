"""`tmt translate --format html|markdown`: a document in, the translated document out; text
as before; one-line errors."""

import re

import pytest

from transformer_mt.cli import main
from transformer_mt.documents.translate import translate_document
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.translator import Translator

from .test_html import PAGE


def run(checkpoint, *args):
    return main(["translate", "--checkpoint", str(checkpoint), "--beam-size", "1", *args])


def last_error(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_an_html_page_is_translated_as_the_library_translates_it(
    reversing_checkpoint, translator, tmp_path
):
    out = tmp_path / "out.html"
    assert (
        run(reversing_checkpoint, "--format", "html", "--input", str(PAGE), "--output", str(out))
        == 0
    )
    expected = translate_document(translator, PAGE.read_text(encoding="utf-8"), "html")
    assert out.read_text(encoding="utf-8") == expected


def test_format_text_is_the_line_translation_byte_for_byte(reversing_checkpoint, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("ein mann fährt rad\n\n<b>zwei</b> hunde\n", encoding="utf-8")
    plain, text = tmp_path / "plain.txt", tmp_path / "text.txt"
    assert run(reversing_checkpoint, "--input", str(source), "--output", str(plain)) == 0
    assert (
        run(reversing_checkpoint, "--format", "text", "--input", str(source), "--output", str(text))
        == 0
    )
    assert text.read_bytes() == plain.read_bytes() and len(plain.read_bytes().split(b"\n")) == 4


def test_no_split_translates_each_unit_whole_as_it_does_each_line(reversing_checkpoint, tmp_path):
    """--no-split had been ignored with a document: its paragraphs were still split."""
    page = tmp_path / "page.html"
    page.write_text("<p>Ein mann fährt rad. Zwei hunde laufen.</p>\n", encoding="utf-8")
    outputs = {}
    for flags in ((), ("--no-split",)):
        out = tmp_path / f"out{len(flags)}.html"
        args = ("--format", "html", "--input", str(page), "--output", str(out), *flags)
        assert run(reversing_checkpoint, *args) == 0
        outputs[flags] = out.read_text(encoding="utf-8")
    whole = Translator.from_checkpoint(
        str(reversing_checkpoint), lines=LineSettings(split_sentences=False), beam_size=1
    )
    assert outputs[("--no-split",)] == translate_document(
        whole, page.read_text(encoding="utf-8"), "html"
    )
    assert outputs[("--no-split",)] != outputs[()]


def test_progress_counts_the_units_translated_then_aligned(reversing_checkpoint, tmp_path, capsys):
    """A document had been translated in silence, however long (8,000 units: 95 s)."""
    page = tmp_path / "page.html"
    page.write_text("<p>ein mann fährt rad</p>\n<p>zwei hunde</p>\n", encoding="utf-8")
    args = ("--format", "html", "--input", str(page), "--output", str(tmp_path / "out.html"))
    assert run(reversing_checkpoint, *args, "--progress") == 0
    err = capsys.readouterr().err
    assert "translating: 100%" in err and "placing markup: 100%" in err and "2/2" in err
    assert run(reversing_checkpoint, *args, "--progress", "--quiet") == 0
    assert capsys.readouterr().err == ""


def test_an_unknown_format_is_refused_by_name(reversing_checkpoint, capsys):
    with pytest.raises(SystemExit) as caught:
        run(reversing_checkpoint, "--format", "pdf")
    assert caught.value.code == 2
    assert "invalid choice: 'pdf'" in capsys.readouterr().err


def test_an_html_document_that_does_not_parse_is_one_line(reversing_checkpoint, tmp_path, capsys):
    page = tmp_path / "page.html"
    page.write_text("<p>ein\n<b>mann</p>", encoding="utf-8")
    assert run(reversing_checkpoint, "--format", "html", "--input", str(page)) == 2
    assert last_error(capsys) == (
        f"error: {page}:2:8: </p> closes <b> of line 2, column 1, which needs its own end tag first"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--alignments"],
            "error: --alignments: for --format text only (a document is not one per line)",
        ),
        (
            ["--nbest", "2"],
            "error: --nbest: for --format text only (a document is not one per line)",
        ),
        (
            ["--alignment-layer", "4"],
            "error: --alignment-layer 4: the model has 1 decoder layer(s)",
        ),
    ],
)
def test_settings_a_document_cannot_take_are_named(
    reversing_checkpoint, tmp_path, capsys, args, message
):
    page = tmp_path / "page.md"
    page.write_text("ein *mann*\n", encoding="utf-8")
    assert run(reversing_checkpoint, "--format", "markdown", "--input", str(page), *args) == 2
    assert last_error(capsys).startswith(message)


def test_a_document_that_is_not_utf8_names_its_line(reversing_checkpoint, tmp_path, capsys):
    page = tmp_path / "page.html"
    page.write_bytes(b"<p>ein mann</p>\n<p>\xff</p>\n")
    assert run(reversing_checkpoint, "--format", "html", "--input", str(page)) == 2
    assert last_error(capsys) == f"error: {page}:2: not valid UTF-8 (byte 0xff at column 4)"


def test_a_byte_order_mark_is_no_part_of_the_document(reversing_checkpoint, tmp_path):
    page, with_bom = tmp_path / "page.md", tmp_path / "bom.md"
    page.write_text("# ein mann\n", encoding="utf-8")
    with_bom.write_text("\ufeff# ein mann\n", encoding="utf-8")
    outs = [tmp_path / "1.md", tmp_path / "2.md"]
    for source, out in zip([page, with_bom], outs, strict=True):
        args = ["--format", "markdown", "--input", str(source), "--output", str(out)]
        assert run(reversing_checkpoint, *args) == 0
    assert outs[0].read_bytes() == outs[1].read_bytes() and outs[0].read_text().startswith("# ")


DEEP = 10_000


@pytest.mark.parametrize(
    "name, document",
    [
        ("deep.html", "<p>" + "<b>" * DEEP + "ein mann" + "</b>" * DEEP + "</p>\n"),
        ("deep.html", "<p>" + "<span><i>" * (DEEP // 2) + "ein mann" + "</i></span>" * (DEEP // 2)),
        ("deep.md", "*" * DEEP + "ein mann" + "*" * DEEP + "\n"),
        ("deep.md", "*ein " * (DEEP // 5) + "mann" + "*" * (DEEP // 5) + "\n"),
    ],
)
def test_a_document_nested_ten_thousand_deep_is_translated(
    reversing_checkpoint, tmp_path, capsys, name, document
):
    page, out = tmp_path / name, tmp_path / f"out-{name}"
    page.write_text(document, encoding="utf-8")
    args = ["--format", "html" if name.endswith("html") else "markdown"]
    assert run(reversing_checkpoint, *args, "--input", str(page), "--output", str(out)) == 0
    translated = out.read_text(encoding="utf-8")
    markup = r"<[^>]*>" if name.endswith("html") else r"\*"
    assert re.findall(markup, translated) == re.findall(markup, document)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "name, document, where, reason",
    [
        (
            "quotes.md",
            "ein mann\n\n" + ">" * DEEP + " ein mann\n",
            "3:1",
            "block quotes and lists nested 100 levels deep (a list and its item count 2): "
            "markdown-it reads no deeper",
        ),
        (
            "lists.md",
            "".join("  " * i + "- ein\n" for i in range(100)),
            "50:1",
            "block quotes and lists nested 100 levels deep (a list and its item count 2): "
            "markdown-it reads no deeper",
        ),
        (
            "nul.md",
            "# ein mann\n\nzwei \x00 hunde\n",
            "3:6",
            "U+0000 is a control character, not text: remove it",
        ),
        (
            "nul.html",
            "<p>ein mann</p>\n<p>zwei \x00 hunde</p>\n",
            "2:9",
            "U+0000 is a control character, not text: remove it",
        ),
        (
            "escape.html",
            "<p>ein \x1b[31m mann</p>\n",
            "1:8",
            "U+001B is a control character, not text: remove it",
        ),
    ],
)
def test_a_document_it_cannot_translate_is_one_line_naming_file_line_and_column(
    reversing_checkpoint, tmp_path, capsys, name, document, where, reason
):
    page = tmp_path / name
    page.write_text(document, encoding="utf-8")
    args = ["--format", "html" if name.endswith("html") else "markdown"]
    assert run(reversing_checkpoint, *args, "--input", str(page)) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == f"error: {page}:{where}: {reason}"
    assert "Traceback" not in err


def test_a_page_is_written_in_the_target_language_and_keeps_its_links(
    reversing_checkpoint, tmp_path
):
    """The root lang is the model's target (the checkpoint's data: en); a Markdown link
    markdown-it would not render keeps its markup."""
    page, out = tmp_path / "page.html", tmp_path / "out.html"
    page.write_text('<html lang="de"><body><p>ein mann</p></body></html>\n', encoding="utf-8")
    assert (
        run(reversing_checkpoint, "--format", "html", "--input", str(page), "--output", str(out))
        == 0
    )
    assert out.read_text(encoding="utf-8").startswith('<html lang="en"><body><p>')
    guide, out = tmp_path / "guide.md", tmp_path / "out.md"
    guide.write_text("ein [mann](javascript:alert(1)) fährt rad\n", encoding="utf-8")
    assert (
        run(
            reversing_checkpoint,
            "--format",
            "markdown",
            "--input",
            str(guide),
            "--output",
            str(out),
        )
        == 0
    )
    translated = out.read_text(encoding="utf-8")
    assert translated.count("[") == 1 and "](javascript:alert(1))" in translated
