"""The `serve` extra: its modules are the ones pyproject.toml installs, and the page ships."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from transformer_mt import serve

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]


def test_the_extra_modules_are_the_serve_extra_of_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extra = project["project"]["optional-dependencies"]["serve"]
    names = [re.split(r"[<>=!~ ]", requirement)[0].replace("-", "_") for requirement in extra]
    assert sorted(names) == sorted(serve.EXTRA_MODULES)
    assert set(extra) <= set(project["project"]["optional-dependencies"]["dev"])
    data = project["tool"]["setuptools"]["package-data"]["transformer_mt.serve"]
    assert any((ROOT / "transformer_mt" / "serve").glob(pattern) for pattern in data)


def test_missing_dependencies_names_the_absent_modules(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "uvicorn" else real(name)
    )
    assert serve.missing_dependencies() == ["uvicorn"]
