"""Rules the interfaces apply around DecodeConfig: the types of the fields they let users set,
and forced decoding's one target prefix per text."""

from __future__ import annotations

import typing
from collections.abc import Iterable, Sized
from typing import Any

from transformer_mt.config.decode import DecodeConfig
from transformer_mt.errors import SettingError


class PrefixCountError(SettingError, ValueError):
    """Forced decoding was given a number of target prefixes other than one per text. It
    carries both counts, so that each interface names what its user gave (the CLI its
    prefix file, the server its `prefix` field)."""

    def __init__(self, n_prefixes: int, n_texts: int):
        self.n_prefixes, self.n_texts = n_prefixes, n_texts
        super().__init__("prefixes", n_prefixes, f"need one per text ({n_texts})")


def check_one_prefix_per_text(prefixes: Sized | None, n_texts: int) -> None:
    """The one check of forced decoding's rule: one target prefix per text (an empty one
    forces nothing), or no prefixes at all (None).

    Raises:
        PrefixCountError: with both counts.
    """
    if prefixes is not None and len(prefixes) != n_texts:
        raise PrefixCountError(len(prefixes), n_texts)


def decode_field_types(names: Iterable[str]) -> dict[str, Any]:
    """The type of each named DecodeConfig field (`int`, `float`, a `Literal`, ...).

    Which fields users may set is each interface's choice (the server's request body,
    `tmt translate`'s flags); their names and types are the dataclass's.

    Raises:
        KeyError: a name that is not a DecodeConfig field.
    """
    hints = typing.get_type_hints(DecodeConfig)
    found = {}
    for name in names:
        if name not in hints:
            raise KeyError(f"{name}: not a DecodeConfig field")
        found[name] = hints[name]
    return found
