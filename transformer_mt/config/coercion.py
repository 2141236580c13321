"""Strict, recursive construction of config dataclasses from plain YAML data.

Every value is checked against its field's type hint; floats accept ints and '1e-4'-style
strings (PyYAML reads `1e-4` as a string), and nothing else is coerced. Each refusal names and
blames the dotted key of the value (`train.lr`, `data.train[0].weight`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import reprlib
import types
import typing
from typing import Any, Literal

from transformer_mt.config.errors import ConfigError

_KINDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


# A value as an error shows it: at most a few items a level and a few levels, so that a YAML
# alias bomb (a kilobyte of text naming the same list 10^9 times over) is shown in a line
# instead of being written out in full.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict = 2, 4, 4
_SHOWN.maxstring = _SHOWN.maxother = 200
_shown = _SHOWN.repr


def from_dict(cls: type, data: Any, prefix: str) -> Any:
    """Dataclass `cls` built from mapping `data`, whose keys are named `{prefix}{key}`.

    Raises:
        ConfigError: `data` is not a mapping, has a key `cls` lacks (with a did-you-mean) or
            lacks a required one, or a value is of the wrong type.
    """
    if not isinstance(data, dict):
        name = prefix.rstrip(".")
        raise ConfigError(
            f"{name or 'config'}: expected a mapping, got {_shown(data)}",
            keys=(name,) if name else (),
        )
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in names:
            guess = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean '{guess[0]}'?" if guess else f"valid keys: {', '.join(names)}"
            raise ConfigError(f"{dotted}: unknown key ({hint})", keys=(dotted,))
        kwargs[key] = coerce(hints[key], value, dotted)
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in kwargs:
            raise ConfigError(
                f"{prefix}{f.name}: required key missing", keys=(f"{prefix}{f.name}",)
            )
    return cls(**kwargs)


def coerce(hint: Any, value: Any, dotted: str) -> Any:
    """Check `value` against a type hint; floats accept ints and '1e-4'-style strings."""
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        # A section whose keys are all commented out (`train:` alone) is YAML's null: empty.
        return from_dict(hint, {} if value is None else value, dotted + ".")
    if origin is Literal:
        return _coerce_choice(typing.get_args(hint), value, dotted)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        return _coerce_union([a for a in args if a is not type(None)], value, dotted)
    if origin is tuple:
        return _coerce_tuple(typing.get_args(hint), value, dotted)
    if hint is float:
        return _coerce_float(value, dotted)
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{dotted}: expected an integer, got {_shown(value)}", keys=(dotted,))
    if hint is bool and not isinstance(value, bool):
        raise ConfigError(f"{dotted}: expected true or false, got {_shown(value)}", keys=(dotted,))
    if hint is str and not isinstance(value, str):
        raise ConfigError(f"{dotted}: expected a string, got {_shown(value)}", keys=(dotted,))
    return value


def _coerce_choice(choices: tuple[Any, ...], value: Any, dotted: str) -> Any:
    """`value` if it is one of a `Literal`'s `choices`, else refused with a did-you-mean."""
    if value not in choices:
        guess = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        extra = f" (did you mean '{guess[0]}'?)" if guess else ""
        raise ConfigError(
            f"{dotted}: {_shown(value)} is not one of {', '.join(map(repr, choices))}{extra}",
            keys=(dotted,),
        )
    return value


def _coerce_tuple(args: tuple[Any, ...], value: Any, dotted: str) -> tuple:
    """A YAML list as a tuple of `args` (`tuple[X, ...]`: a list of any length), each item
    named `{dotted}[i]`."""
    variable = args[-1:] == (Ellipsis,)
    if not isinstance(value, (list, tuple)) or (not variable and len(value) != len(args)):
        count = "" if variable else f" of {len(args)} values"
        raise ConfigError(f"{dotted}: expected a list{count}, got {_shown(value)}", keys=(dotted,))
    if variable:
        args = args[:1] * len(value)
    return tuple(
        coerce(a, v, f"{dotted}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True))
    )


def _coerce_float(value: Any, dotted: str) -> float:
    """A finite number from an int, a float or a '1e-4'-style string; not from a bool."""
    if isinstance(value, bool):
        raise ConfigError(f"{dotted}: expected a number, got {_shown(value)}", keys=(dotted,))
    number = None
    if isinstance(value, (int, float, str)):
        try:
            number = float(value)
        except OverflowError:  # an integer past float's range: no finite number
            number = math.inf
        except ValueError:
            pass
    if number is None:
        raise ConfigError(f"{dotted}: expected a number, got {_shown(value)}", keys=(dotted,))
    if not math.isfinite(number):  # YAML's .nan and .inf: no setting means either
        raise ConfigError(
            f"{dotted}: expected a finite number, got {_shown(value)}", keys=(dotted,)
        )
    return number


def _coerce_union(members: list[Any], value: Any, dotted: str) -> Any:
    """`value` as the member of a union it is written as: a list as the tuple member, anything
    else as the other (`data.train`: one path, or a list of sources)."""
    if len(members) == 1:
        return coerce(members[0], value, dotted)
    # Unions of two types pair a scalar with a tuple (`str | tuple[TrainSource, ...]`).
    (listed,) = [m for m in members if typing.get_origin(m) is tuple]
    (scalar,) = [m for m in members if m is not listed]
    if isinstance(value, (list, tuple)):
        return coerce(listed, value, dotted)
    try:
        return coerce(scalar, value, dotted)
    except ConfigError:
        kind = _KINDS.get(scalar, scalar.__name__)
        raise ConfigError(
            f"{dotted}: expected {kind} or a list, got {_shown(value)}", keys=(dotted,)
        ) from None
