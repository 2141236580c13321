"""Dependencies point one way: inference never imports training, the checkpoint format
(artifacts.py) sits below both, and the model knows nothing of search, data or training."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "transformer_mt"

# Modules (as a path under the package) and the package parts they must not import.
FORBIDDEN = {
    "inference": ("training", "cli"),
    "artifacts.py": ("training", "inference", "search", "cli"),
    "model": ("search", "training", "data", "inference", "artifacts", "cli"),
    "search": ("model", "training", "data", "inference", "artifacts", "cli"),
}


def _imported(path: Path) -> set[str]:
    """Every transformer_mt module `path` imports, at any depth of its body."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.startswith("transformer_mt.")}


@pytest.mark.parametrize("part", sorted(FORBIDDEN))
def test_no_import_against_the_direction_of_the_layers(part):
    root = PACKAGE / part
    files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
    assert files
    bad = {
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in files
        for name in _imported(path)
        if name.split(".")[1] in FORBIDDEN[part]
    }
    assert not bad, sorted(bad)
