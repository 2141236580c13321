"""Which `ModelConfig` values an outside format can express, and the one check that reads it.

Each target format (Hugging Face Marian and M2M100, CTranslate2) keeps one table beside its
mapping: `ModelConfig` field -> the values the format holds, with the reason. An option the
mapping does not carry over would otherwise be exported as a different network, so the check
refuses it by name before a weight is copied. A field missing from a table is one the format
holds in every value (or one that changes no output, such as `attention_backend`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformer_mt.config import ModelConfig
from transformer_mt.errors import TmtError


@dataclass(frozen=True)
class Limit:
    """The values of one `ModelConfig` field a format holds.

    `allowed` is the tuple of values it holds, or a test of the whole config for a field
    whose meaning depends on another (`n_kv_heads` None means `n_heads`). `why` is what the
    format computes instead, shown in the refusal.
    """

    allowed: tuple[object, ...] | Callable[[ModelConfig], bool]
    why: str

    def holds(self, cfg: ModelConfig, field: str) -> bool:
        if callable(self.allowed):
            return self.allowed(cfg)
        return getattr(cfg, field) in self.allowed


@dataclass(frozen=True)
class FormatLimits:
    """One format's table: its refusal's opening words and its limits by field, in the order
    a refusal names them.

    `reasons_shown` false: the refusal names the settings alone, then "not supported"
    (CTranslate2's wording); the reasons stay here for the reader.
    """

    refusal: str  # "cannot map to Hugging Face Marian"
    limits: dict[str, Limit]
    reasons_shown: bool = True


def check_expressible(table: FormatLimits, cfg: ModelConfig) -> None:
    """Refuse `cfg` when `table`'s format cannot express one of its values.

    Every field the format cannot hold is named, in table order, as `model.FIELD=VALUE`, so
    that a refusal shows all there is to change at once.

    Raises:
        TmtError: "REFUSAL: model.FIELD=VALUE (why); ..." (without the reasons, "REFUSAL:
            model.FIELD=VALUE; ... not supported").
    """
    refused = [
        (f"model.{field}={_yaml_value(getattr(cfg, field))}", limit.why)
        for field, limit in table.limits.items()
        if not limit.holds(cfg, field)
    ]
    if not refused:
        return
    if table.reasons_shown:
        named = "; ".join(f"{setting} ({why})" for setting, why in refused)
    else:
        named = "; ".join(setting for setting, _ in refused) + " not supported"
    raise TmtError(f"{table.refusal}: {named}")


def _yaml_value(value: object) -> str:
    """A value as the config file writes it (booleans lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)
