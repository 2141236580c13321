"""Dependencies point one way: inference never imports training, the checkpoint format
(artifacts.py) sits below both, and the model imports its config and nothing else of the
package: no search, data or training, and no facts of a machine (machine.py, kernels.py). Inside
the server, the HTTP side (serve/http/) knows the decoding engine (serve/engine/) only through
serve/contract.py, and the engine knows nothing of HTTP.

The rules and the import reader are scripts/import_graph.py's, which also draws them as
docs/dev/imports.png."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", REPO / "scripts/import_graph.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


graph = _load_import_graph()


@pytest.fixture(scope="module")
def imports():
    return graph.read_imports()


@pytest.mark.parametrize("part", sorted({*graph.RULES, *graph.ONLY}))
def test_no_import_against_the_direction_of_the_layers(part, imports):
    assert any(graph.group_of(i.source) == part for i in imports)  # the part was read
    bad = [line for line in graph.violations(imports) if graph.group_of(line.split()[0]) == part]
    assert not bad, bad


def test_a_crossing_import_at_any_depth_is_named_and_fails_the_check(tmp_path, capsys):
    package = tmp_path / "transformer_mt"
    for folder in ("model", "training", "inference"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "training" / "run.py").write_text("from transformer_mt.model import layers\n")
    (package / "model" / "layers.py").write_text("import torch\n")
    (package / "inference" / "export.py").write_text(
        "def export():\n    from transformer_mt.training.run import main\n"
    )
    (package / "model" / "attention.py").write_text("from transformer_mt import training\n")
    assert graph.main(["--check", "--package", str(package)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "layer rule broken: inference.export imports training.run",
        "layer rule broken: model.attention imports training",
    ]
    (package / "inference" / "export.py").write_text("from transformer_mt.model import layers\n")
    (package / "model" / "attention.py").write_text("from transformer_mt.model import layers\n")
    assert graph.main(["--check", "--package", str(package)]) == 0


def test_the_model_imports_its_config_and_nothing_else_of_the_package(tmp_path, capsys):
    """Not the machine's facts, whichever module holds them: kernel choice lives above."""
    package = tmp_path / "transformer_mt"
    (package / "model").mkdir(parents=True)
    for name in ("config", "machine", "kernels", "files"):
        (package / f"{name}.py").write_text("")
    (package / "kernels.py").write_text("from transformer_mt import machine, model\n")
    (package / "model" / "layers.py").write_text("from transformer_mt.config import ModelConfig\n")
    (package / "model" / "attention.py").write_text(
        "from transformer_mt.machine import native_bf16\n"
        "def attention():\n    from transformer_mt import files, kernels\n"
    )
    assert graph.main(["--check", "--package", str(package)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "layer rule broken: model.attention imports files",
        "layer rule broken: model.attention imports kernels",
        "layer rule broken: model.attention imports machine",
    ]
    (package / "model" / "attention.py").write_text("from transformer_mt.model import layers\n")
    assert graph.main(["--check", "--package", str(package)]) == 0


def test_the_http_side_of_the_server_knows_the_engine_only_through_the_contract(tmp_path, capsys):
    package = tmp_path / "transformer_mt"
    for folder in ("serve", "serve/engine", "serve/http"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "serve" / "contract.py").write_text("")
    (package / "serve" / "engine" / "paged.py").write_text("")
    (package / "serve" / "engine" / "engine.py").write_text(
        "from transformer_mt.serve.contract import Engine\n"
        "from transformer_mt.serve.engine import paged\n"
        "from transformer_mt.serve.http import api\n"
    )
    (package / "serve" / "server.py").write_text(
        "from transformer_mt.serve.contract import Engine\n"
        "from transformer_mt.serve.http import app\n"
    )
    (package / "serve" / "http" / "api.py").write_text(
        "from transformer_mt.serve.engine import Engine\n"
    )
    (package / "serve" / "http" / "app.py").write_text(
        "from transformer_mt.serve.contract import Engine\n"
        "from transformer_mt.serve.http import api\n"
        "def create_app():\n    from transformer_mt.serve.engine.paged import BlockPool\n"
    )
    assert graph.main(["--check", "--package", str(package)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "layer rule broken: serve.engine.engine imports serve.http.api",
        "layer rule broken: serve.http.api imports serve.engine",
        "layer rule broken: serve.http.app imports serve.engine.paged",
    ]
    (package / "serve" / "engine" / "engine.py").write_text(
        "from transformer_mt.serve.contract import Engine\n"
    )
    (package / "serve" / "http" / "api.py").write_text(
        "from transformer_mt.serve import contract\n"
    )
    (package / "serve" / "http" / "app.py").write_text(
        "from transformer_mt.serve.http import api\n"
    )
    assert graph.main(["--check", "--package", str(package)]) == 0


def test_the_picture_is_linked_from_the_docs():
    assert (REPO / "docs/dev/imports.png").stat().st_size > 10_000
    assert "imports.png" in (REPO / "docs/dev/interfaces.md").read_text(encoding="utf-8")
    assert "docs/dev/imports.png" in (REPO / "README.md").read_text(encoding="utf-8")


def test_loading_a_translator_imports_neither_the_compiler_nor_datasets():
    """Dynamo (torch.compile) and `datasets` (with pandas) take a second or more each to import:
    a command that only translates pays for neither."""
    code = (
        "import sys, transformer_mt.inference.translator; "
        "print(sorted({'torch._dynamo', 'datasets'} & set(sys.modules)))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "[]"
