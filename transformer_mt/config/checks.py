"""The range checks that the `validate()` of several config sections share."""

from __future__ import annotations

from typing import Any

from transformer_mt.config.errors import ConfigError


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
