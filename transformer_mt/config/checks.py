"""The range checks that the `validate()` of several config sections share."""

from __future__ import annotations

import string
from typing import Any

from transformer_mt.config.errors import ConfigError

# The characters of a language code as data files (`{prefix}.{code}`) and language tags
# (`>>code<<`) write it: en, pt-BR, fra_Latn. No path separator, dot or space: a code names
# files.
LANGUAGE_CODE_CHARACTERS = frozenset(string.ascii_letters + string.digits + "_-")


def check_positive(section: Any, name: str, fields: list[str]) -> None:
    """Refuse a field of `section` (named `name` in YAML) that is not above 0."""
    for f in fields:
        if getattr(section, f) <= 0:
            raise ConfigError(
                f"{name}.{f}={getattr(section, f)} must be > 0", keys=(f"{name}.{f}",)
            )


def check_unit_interval(section: Any, name: str, fields: list[str]) -> None:
    """Refuse a field of `section` (a probability such as a dropout rate) outside [0, 1)."""
    for f in fields:
        if not 0.0 <= getattr(section, f) < 1.0:
            raise ConfigError(
                f"{name}.{f}={getattr(section, f)} must be in [0, 1)", keys=(f"{name}.{f}",)
            )


def check_language_code(code: str, where: str, key: str) -> None:
    """Refuse a language code (`where` names it as the message starts, `key` is its setting)
    that is not letters, digits, "_" and "-": a blank one or a path ("../../etc/passwd") would
    otherwise pass the config and be found missing as a file, or become a tag of no language.
    """
    if not code or code[0] in "_-" or not set(code) <= LANGUAGE_CODE_CHARACTERS:
        raise ConfigError(
            f"{where}: a language code is letters, digits, '_' and '-', e.g. en, pt-BR, fra_Latn",
            keys=(key,),
        )
