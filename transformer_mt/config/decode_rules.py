"""What the interfaces read off DecodeConfig: the types of the fields they let users set."""

from __future__ import annotations

import typing
from collections.abc import Iterable
from typing import Any

from transformer_mt.config.decode import DecodeConfig


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
