"""The files of a model directory, each checked before anything opens it, and its JSON read
strictly.

A file the import reads must be a regular file it may read. Anything else is refused by its
name and what it is: opening a FIFO blocks until a writer comes, a symlink loop or a
directory fails deep inside another library, and transformers tests `os.path.isfile` and
quietly reads another file (pytorch_model.bin beside a broken model.safetensors) or none (a
tokenizer.json that is a FIFO) instead. The file type is read with `stat` before the file is
opened, and the one open that proves it readable does not block.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from transformer_mt.errors import TmtError, one_line
from transformer_mt.interop.hf_m2m100 import SPM_FILE
from transformer_mt.text_files import file_problem

# Every file the importers read, or transformers reads for them (tokenizer and generation
# configs, weights): one that is present must be readable.
READ_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.json",
    "vocab.json",
    "target_vocab.json",
    "source.spm",
    "target.spm",
    SPM_FILE,
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)

TOKENIZER_NEEDS_IT = "the model's tokenizer needs it"


def check_file(path: Path, needed_for: str = TOKENIZER_NEEDS_IT) -> None:
    """Raise TmtError unless `path` is a readable regular file (`needed_for`: why a missing
    one is needed)."""
    problem = file_problem(path)
    if problem == "missing":
        raise TmtError(f"{path}: missing; {needed_for}")
    if problem is not None:
        raise TmtError(f"{path}: {problem}")


def present(path: Path) -> bool:
    """Whether `path` names anything at all, a broken symlink included."""
    return os.path.lexists(path)


def check_model_files(directory: Path) -> None:
    """Refuse the directory when a file the import reads is present but unreadable, or when
    any entry is a symlink loop (which no comparison of paths can resolve).

    Raises:
        TmtError: naming the file and what it is instead of a readable regular file.
    """
    for name in READ_FILES:
        if present(directory / name):
            check_file(directory / name)
    for entry in directory.iterdir():
        if entry.is_symlink() and file_problem(entry) == "a symlink loop":
            raise TmtError(f"{entry}: a symlink loop")


def read_json(path: Path, required: bool = True) -> dict[str, Any]:
    """The JSON object in `path`; {} for a missing optional file.

    Raises:
        TmtError: the file is not a readable regular file, not JSON, not an object, or holds
            one key twice (JSON readers keep one of the two values silently).
    """
    if not present(path) and not required:
        return {}
    check_file(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_unique_keys)
    except RecursionError:
        raise TmtError(f"{path}: not readable JSON (nested too deeply)") from None
    except (OSError, ValueError) as err:
        raise TmtError(f"{path}: not readable JSON ({one_line(err)})") from None
    if not isinstance(data, dict):
        raise TmtError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"key {key!r} appears twice")
        data[key] = value
    return data
