"""A glossary with a document: `tmt translate --format html|markdown --glossary` puts the target
terms into the translated document's text, as the library does, and the server answers the
same request with the same document."""

from __future__ import annotations

import re

import pytest

from transformer_mt.cli import main
from transformer_mt.documents import html, markdown
from transformer_mt.documents.translate import translate_document
from transformer_mt.errors import SettingError
from transformer_mt.inference.glossary import Glossary
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator

DOCUMENTS = {
    "html": '<html lang="de"><body><h1>zwei hunde</h1>\n'
    "<p>zwei <b>hunde</b> spielen im schnee. ein mann liest</p>\n<p>eine frau liest</p>"
    "</body></html>\n",
    "markdown": "# zwei hunde\n\nzwei *hunde* spielen im schnee. ein mann liest\n\n"
    "eine frau liest\n",
}
# The term also inside code, where no term is forced (kept as written).
WITH_CODE = {
    "html": DOCUMENTS["html"].replace(
        "<p>eine frau", "<p>zwei <code>hunde</code> lesen</p>\n<p>eine frau"
    ),
    "markdown": DOCUMENTS["markdown"] + "\nzwei `hunde` lesen\n",
}
REGIONS = {"html": html.regions, "markdown": markdown.regions}
TERM = ("hunde", "rad")  # a target the reversing model never writes for these sentences


def units(document: str, fmt: str) -> list[str]:
    """The translatable texts of `document`, in order."""
    return [r.unit.text for r in REGIONS[fmt](document) if r.unit.translatable]


def has_word(text: str, word: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}", text) is not None


def translate_file(checkpoint, tmp_path, fmt: str, *options: str, document: str = "") -> str:
    source, out = tmp_path / f"in.{fmt}", tmp_path / f"out-{len(options)}.{fmt}"
    source.write_text(document or DOCUMENTS[fmt], encoding="utf-8")
    args = ["--checkpoint", str(checkpoint), "--beam-size", "3", "--format", fmt]
    code = main(["translate", *args, "--input", str(source), "--output", str(out), *options])
    assert code == 0
    return out.read_text(encoding="utf-8")


@pytest.mark.parametrize("fmt", ["html", "markdown"])
def test_a_glossary_puts_its_terms_into_a_documents_text(reversing_checkpoint, tmp_path, fmt):
    terms = tmp_path / "terms.tsv"
    terms.write_text("\t".join(TERM) + "\n", encoding="utf-8")
    plain = translate_file(reversing_checkpoint, tmp_path, fmt)
    with_terms = translate_file(reversing_checkpoint, tmp_path, fmt, "--glossary", str(terms))
    sources, targets = units(DOCUMENTS[fmt], fmt), units(with_terms, fmt)
    assert len(sources) == len(targets) == 3
    for source, target in zip(sources, targets, strict=True):  # per unit: its terms only
        assert has_word(target, TERM[1]) == has_word(source, TERM[0]), (source, target)
    assert not any(has_word(t, TERM[1]) for t in units(plain, fmt))
    translator = Translator.from_checkpoint(str(reversing_checkpoint), beam_size=3)
    glossary = Glossary.load(terms)
    document = Texts.of([DOCUMENTS[fmt]], glossary=glossary)
    assert with_terms == translate_document(translator, document, fmt)


@pytest.mark.parametrize(("fmt", "code"), [("html", "<code>hunde</code>"), ("markdown", "`hunde`")])
def test_a_term_only_in_code_is_not_forced(reversing_checkpoint, fmt, code):
    # Code is kept as written, not translated: its term's target would stand beside it.
    translator = Translator.from_checkpoint(str(reversing_checkpoint), beam_size=3)
    document = Texts.of([f"zwei {code} spielen im schnee\n"], glossary=Glossary.of_pairs([TERM]))
    (unit,) = units(translate_document(translator, document, fmt), fmt)
    assert not has_word(unit, TERM[1]) and "hunde" in unit
    document = Texts.of([f"zwei {code} hunde spielen\n"], glossary=Glossary.of_pairs([TERM]))
    (unit,) = units(translate_document(translator, document, fmt), fmt)
    assert has_word(unit, TERM[1])  # found outside the code too


@pytest.mark.parametrize("option", ["prefixes", "constraints"])
def test_a_document_refuses_what_no_unit_can_keep(reversing_checkpoint, option):
    translator = Translator.from_checkpoint(str(reversing_checkpoint), beam_size=3)
    given = {"prefixes": ["zwei"], "constraints": [["rad"]]}[option]
    with pytest.raises(SettingError, match=f"{option}: a document is translated unit by unit"):
        translate_document(translator, Texts.of([DOCUMENTS["html"]], **{option: given}), "html")


def test_the_cli_refuses_constraints_with_a_document(reversing_checkpoint, tmp_path, capsys):
    phrases = tmp_path / "phrases.txt"
    phrases.write_text("rad\n", encoding="utf-8")
    source = tmp_path / "in.html"
    source.write_text(DOCUMENTS["html"], encoding="utf-8")
    args = ["--checkpoint", str(reversing_checkpoint), "--format", "html"]
    assert main(["translate", *args, "--input", str(source), "--constraints", str(phrases)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: --constraints: for --format text only (a document is not one per line)"
    )


@pytest.mark.parametrize("documents", [DOCUMENTS, WITH_CODE], ids=["text", "code"])
@pytest.mark.parametrize("fmt", ["html", "markdown"])
def test_the_server_translates_a_document_with_a_glossary_as_tmt_translate(
    reversing_checkpoint, tmp_path, fmt, documents
):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from transformer_mt.serve.engine import Engine, ServeLimits
    from transformer_mt.serve.http.app import create_app

    terms = tmp_path / "terms.tsv"
    terms.write_text("\t".join(TERM) + "\n", encoding="utf-8")
    document = documents[fmt]
    expected = translate_file(
        reversing_checkpoint, tmp_path, fmt, "--glossary", str(terms), document=document
    )
    body = {
        "text": document,
        "format": fmt,
        "beam_size": 3,
        "glossary": [{"source": TERM[0], "target": TERM[1]}],
    }
    limits = ServeLimits(kv_blocks=256, block_size=4)
    engine = Engine.from_checkpoint(str(reversing_checkpoint), limits=limits)
    engine.start()
    try:
        client = TestClient(create_app(engine), base_url="http://127.0.0.1:8000")
        response = client.post("/v1/translate", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["translations"][0]["text"] == expected
    finally:
        engine.stop(drain=False)
