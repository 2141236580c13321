"""The scripts written without spaces between words (Chinese, Japanese; Thai, Lao, Khmer,
Burmese): which characters they are, for the places that must tell them from the others; the
bidirectional controls that a translation cannot keep; and whether a text holds a letter of
any script at all (one without is not translated: inference/translation.py).

A document's inline markup goes around words (documents/units.py), and in Chinese and Japanese
each character stands for a word, as no space marks where one ends; translated sentences are
joined back into their line (inference/sentences.py) without a space between two such
sentences and with one where either side is another script's, whatever the source had between
them. Thai, Lao, Khmer and Burmese also write words without spaces between them, so a target
phrase in them is spelled as inside a sentence (inference/constrained.py) and BLEU's 13a reads
their sentences as one word (evaluation.py); but they put a space between sentences, and join
vowel and tone marks to most letters, so their joints and their document words are left as the
text has them.
"""

from __future__ import annotations

import re

from transformer_mt.langid import names_one_language, primary_code

# Han, kana, CJK punctuation and full-width forms (U+3000, the ideographic space, is whitespace).
_BASES = (
    "\u3001-\u303f\u3040-\u3098\u309b-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\ufe10-\ufe19\ufe30-\ufe6f\uff01-\uff9d\U00020000-\U0003134f"
)
# What joins the character before it: kana voicing marks (half-width ones too), variation
# selectors.
_MARKS = "\u3099\u309a\uff9e\uff9f\ufe00-\ufe0f\U000e0100-\U000e01ef"
# One Chinese or Japanese character with the marks that join it (a regular expression); a run
# of Thai, Lao, Khmer or Burmese stays one word (see the module).
UNSPACED_CHARACTER = f"[{_BASES}][{_MARKS}]*"
# Thai, Lao, Burmese (and its extensions), Khmer (and its symbols).
_SOUTHEAST_ASIAN = "\u0e00-\u0eff\u1000-\u109f\ua9e0-\ua9ff\uaa60-\uaa7f\u1780-\u17ff\u19e0-\u19ff"

_BASE = re.compile(f"[{_BASES}]")
_WORD_BASE = re.compile(f"[{_BASES}{_SOUTHEAST_ASIAN}]")
_CLOSING_QUOTES = "\u201d\u2019\"'\u00bb"
_TRAILING_MARKS = re.compile(f"[{_MARKS}]+$")


def starts_unspaced(text: str) -> bool:
    """Whether `text` starts with a character of a script written without spaces between
    words."""
    return _WORD_BASE.match(text) is not None


def ends_unspaced(text: str) -> bool:
    """Whether `text` ends with a Chinese or Japanese character, which joins the next
    sentence without a space (its marks and the closing quotes both kinds of text use aside:
    `他说：“我走了。”`)."""
    base = _TRAILING_MARKS.sub("", text).rstrip(_CLOSING_QUOTES)
    return bool(base) and _BASE.match(base[-1]) is not None


# Languages written without spaces between words (`jap`: OPUS-MT's code for Japanese).
UNSPACED_LANGUAGES = frozenset(
    {"ja", "jpn", "jap", "zh", "zho", "cmn", "yue", "wuu"}
    | {"th", "tha", "lo", "lao", "km", "khm", "my", "mya"}
)


def writes_without_spaces(language: str | None) -> bool | None:
    """Whether text in `language` (a code such as ja, zh-Hant, jpn_Jpan) is written without
    spaces between words; None where the code names no one language (None, `tgt`, `mul`, a
    group such as `ROMANCE`: `langid.names_one_language`): the text's own script must tell."""
    if language is None or not names_one_language(language):
        return None
    return primary_code(language) in UNSPACED_LANGUAGES


def has_unspaced(text: str) -> bool:
    """Whether `text` holds a character of a script written without spaces between words."""
    return _WORD_BASE.search(text) is not None


# The controls that open and close a passage of another direction (embeddings, overrides,
# isolates: U+202A-E, U+2066-9). A translation keeps none of them: the model reads each as an
# unknown piece, which changes the translation ("\u202bEin Hund läuft.\u202c" had become "A new
# dog is running."), and its words come in another order, so that an opener kept where the
# source had it lost its closer and displayed the rest of the line reversed. The marks
# U+200E/U+200F stand alone and stay.
_PASSAGE_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")


def without_direction_passages(text: str) -> str:
    """`text` without the bidi controls that open or close a passage (see above)."""
    return _PASSAGE_CONTROLS.sub("", text)


def has_letter(text: str) -> bool:
    """Whether `text` holds a letter of any script (Unicode's L categories): digits, marks,
    punctuation, symbols and emoji are none."""
    return any(char.isalpha() for char in text)
