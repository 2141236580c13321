"""Language identification answers in the model's own codes, with lingua's confidence; its
accuracy on Multi30k is measured in docs/results.md, not here."""

import sys

import pytest

from transformer_mt import langid
from transformer_mt.errors import TmtError

pytest.importorskip("lingua", reason="lingua-language-detector: the langid extra")

SENTENCES = {
    "en": "Two young children are playing in the snow.",
    "de": "Zwei junge Kinder spielen im Schnee.",
    "fr": "Deux jeunes enfants jouent dans la neige.",
    "cs": "Dvě malé děti si hrají ve sněhu.",
}


@pytest.fixture(scope="module")
def identifier():
    return langid.LanguageIdentifier(list(SENTENCES))


def test_each_text_gets_its_language_and_a_confidence(identifier):
    found = identifier.detect(list(SENTENCES.values()))
    assert [d.code for d in found] == list(SENTENCES)
    assert all(0.5 < d.confidence <= 1.0 for d in found)


def test_a_text_without_letters_gets_no_language(identifier):
    assert identifier.detect(["", "1 2 3 !"]) == [langid.Detection(None, 0.0)] * 2


def test_the_answer_is_in_the_code_it_was_given():
    """ISO 639-3 (OPUS-MT tags) and NLLB codes, whose 639-3 part may be an individual language
    lingua knows by its macrolanguage (arb: Arabic)."""
    identifier = langid.LanguageIdentifier(["deu_Latn", "fra_Latn", "arb_Arab"])
    found = identifier.detect([SENTENCES["fr"], SENTENCES["de"], "رجل يركب دراجة"])
    assert [d.code for d in found] == ["fra_Latn", "deu_Latn", "arb_Arab"]
    assert langid.known(["ces", "xx", "tlh_Latn", "en"]) == ("ces", "en")


def test_a_code_lingua_does_not_know_is_named():
    with pytest.raises(langid.UnknownLanguage, match="lingua knows no language 'tlh'") as err:
        langid.LanguageIdentifier(["en", "tlh"])
    assert err.value.code == "tlh"


def test_without_lingua_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "lingua", None)  # `import lingua` raises ImportError
    with pytest.raises(langid.LinguaMissing, match=r"pip install 'transformer_mt\[langid\]'"):
        langid.LanguageIdentifier(["en", "de"])
    assert issubclass(langid.LinguaMissing, TmtError)
