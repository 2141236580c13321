"""Checksums of a checkpoint's contents: written with every checkpoint, checked when one loads.

torch notices a file cut short, but not damage inside it (a flipped bit in a tensor, a bad
sector, an editor that saved it as text): such a file loads and computes garbage. So every
checkpoint dict carries the SHA-256 of each tensor, keyed by its path, and one of all its
other values (`artifacts.save_checkpoint`), and loading compares (`artifacts.load_checkpoint`),
naming what differs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from transformer_mt.errors import TmtError

CHECKSUMS_KEY = "checksums"


def checksums(state: dict[str, Any]) -> dict[str, Any]:
    """The `checksums` entry of a checkpoint dict: SHA-256 of each tensor, keyed by its path,
    and one of every other value (config, tokenizers, step, ...) together.

    Tuples and lists hash alike, so the value digest does not depend on how a loader
    rebuilds sequences.
    """
    tensors: dict[str, str] = {}
    values = hashlib.sha256()

    def visit(value: object, path: str) -> None:
        if isinstance(value, Tensor):
            tensors[path] = tensor_digest(value)
        elif isinstance(value, dict):
            values.update(f"{path}{{{len(value)};".encode())
            for key, item in value.items():
                visit(item, f"{path}/{key}")
        elif isinstance(value, (list, tuple)):
            values.update(f"{path}[{len(value)};".encode())
            for i, item in enumerate(value):
                visit(item, f"{path}/{i}")
        elif isinstance(value, bytes):
            values.update(f"{path}=bytes{len(value)}:".encode())
            values.update(value)
        else:
            values.update(f"{path}={value!r};".encode())

    for key, value in state.items():
        if key != CHECKSUMS_KEY:
            visit(value, key)
    return {"tensors": tensors, "values": values.hexdigest()}


def tensor_digest(tensor: Tensor) -> str:
    """SHA-256 of a tensor's dtype, shape and elements in row-major order."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    digest = hashlib.sha256(f"{flat.dtype}{tuple(tensor.shape)}:".encode())
    digest.update(flat.view(torch.uint8).numpy())
    return digest.hexdigest()


def check_checksums(state: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint whose contents differ from the checksums written with them.

    Raises:
        TmtError: a tensor or the other values do not match (or the checksums are damaged).
    """
    recorded = state.get(CHECKSUMS_KEY)
    if recorded is None:
        return  # written before checkpoints carried checksums
    found = checksums(state)
    if not isinstance(recorded, dict) or recorded.keys() != found.keys():
        raise TmtError(f"{path}: damaged checkpoint (its checksums are unreadable)")
    names = recorded["tensors"].keys() | found["tensors"].keys()
    bad = sorted(n for n in names if recorded["tensors"].get(n) != found["tensors"].get(n))
    parts = [f"{bad[0]} and {len(bad) - 1} more tensors" if len(bad) > 1 else bad[0]] if bad else []
    if recorded["values"] != found["values"]:
        parts.insert(0, "its config, tokenizers or other values")
    if parts:
        verb = "does" if parts == bad[:1] else "do"
        raise TmtError(
            f"{path}: damaged checkpoint ({' and '.join(parts)} {verb} not match the checksums "
            "saved with it); use another checkpoint of the run"
        )
