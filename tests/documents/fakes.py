"""Scripted translators for the documents tests: no model, known alignments."""

from collections.abc import Sequence

from transformer_mt.documents.units import AlignedText


def echo(texts: Sequence[str]) -> list[AlignedText]:
    """Each text in upper case, word i aligned to word i."""
    return [_aligned(" ".join(text.split()).upper()) for text in texts]


def same(texts: Sequence[str]) -> list[AlignedText]:
    """Each text as it is (whitespace runs as one space), word i aligned to word i: whatever
    changes in a document is the splicing's."""
    return [_aligned(" ".join(text.split())) for text in texts]


def saying(translation: str):
    """A translator that answers `translation` to every text, its words aligned in order."""

    def translate(texts: Sequence[str]) -> list[AlignedText]:
        return [_aligned(translation) for _ in texts]

    return translate


def _aligned(text: str) -> AlignedText:
    return AlignedText(text, tuple((i, i) for i in range(len(text.split()))))
