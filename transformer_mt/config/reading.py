"""The YAML reader of config files: the mapping a file holds, or a one-line ConfigError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from transformer_mt.config.errors import ConfigError
from transformer_mt.errors import one_line
from transformer_mt.text_files import file_problem

# Configs are a few KB; PyYAML parses about 1 MB a second, so a file far larger is a mistake
# (a corpus named as the config) that would take minutes to refuse.
MAX_CONFIG_BYTES = 4 << 20


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping a config file holds; every way of not being one is a one-line ConfigError.

    Errors of the file itself (not found, not UTF-8, not YAML) blame no key; a key given
    twice is blamed by its dotted name.
    """
    text = _read_text(path)
    try:
        loader = yaml.SafeLoader(text)  # refuses control characters as it is made
        try:
            root = loader.get_single_node()
            if root is not None:
                _refuse_duplicate_keys(root, path)
            data = {} if root is None else loader.construct_document(root)
        finally:
            loader.dispose()
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({one_line(err)})", keys=()) from None
    except RecursionError:  # PyYAML descends one Python call per level of nesting
        raise ConfigError(f"{path}: not valid YAML (nested too deeply)", keys=()) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections", keys=())
    return data


def _read_text(path: Path) -> str:
    """The file's text, refused when it is missing, a folder, unreadable or not UTF-8, or not
    a regular file: a pipe (`<(cat x.yaml)`) gives its text once and `tmt train` reads the
    config twice (the second read would be empty: the defaults), a device may never end."""
    problem = None if path.is_dir() else file_problem(path)
    if problem not in (None, "missing"):
        raise ConfigError(f"{path}: is {problem}; give the config as a file", keys=())
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found", keys=()) from None
    except IsADirectoryError:
        raise ConfigError(
            f"{path}: is a folder, not a config file; name a .yaml file", keys=()
        ) from None
    except OSError as err:
        raise ConfigError(
            f"{path}: cannot read the config file ({err.strerror})", keys=()
        ) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: over {MAX_CONFIG_BYTES >> 20} MiB, too large for a config file; is it the "
            "config?",
            keys=(),
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ConfigError(
            f"{path}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x}); save the file as UTF-8",
            keys=(),
        ) from None


def _refuse_duplicate_keys(root: yaml.Node, path: Path) -> None:
    """Refuse a key given twice in one mapping, at any depth.

    PyYAML silently keeps the last of two equal keys, so a file that sets `train.lr` twice
    would train with whichever came last, unnoticed.
    """
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    visited: set[int] = set()  # aliases share nodes, and may even point back at an ancestor
    while stack:
        node, name = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{name}[{i}]") for i, item in enumerate(node.value))
        if not isinstance(node, yaml.MappingNode):
            continue
        first_lines: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue  # a list or mapping as a key: no config section has one
            dotted = f"{name}.{key.value}" if name else key.value
            line = key.start_mark.line + 1
            if (key.tag, key.value) in first_lines:
                first = first_lines[(key.tag, key.value)]
                raise ConfigError(
                    f"{path}:{line}: duplicate key {dotted} (first at line {first}); keep one",
                    keys=(dotted,),
                )
            first_lines[(key.tag, key.value)] = line
            stack.append((value, dotted))
