"""The package's public API: the names resolve, the docstring example works, and importing the
package (as `tmt --help` does) loads no torch."""

import subprocess
import sys
from pathlib import Path

import pytest

import transformer_mt
from transformer_mt.config import load_config
from transformer_mt.inference.translator import Translator
from transformer_mt.model import build_model
from transformer_mt.training.run import run_training

from .training.conftest import write_config, write_corpus

REPO = Path(__file__).resolve().parents[1]


def test_public_names_are_the_library_functions():
    assert transformer_mt.load_config is load_config
    assert transformer_mt.build_model is build_model
    assert transformer_mt.train is run_training
    assert transformer_mt.Translator is Translator
    assert set(transformer_mt.__all__) <= set(dir(transformer_mt))
    with pytest.raises(AttributeError, match="has no attribute 'Trainer'"):
        transformer_mt.Trainer  # noqa: B018


def test_importing_the_package_and_building_the_cli_loads_no_torch():
    code = (
        "import sys, transformer_mt, transformer_mt.cli as cli; cli.build_parser(); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_docstring_example_trains_and_translates(tmp_path):
    """The example of `transformer_mt.__doc__`, on the tiny test corpus."""
    write_corpus(tmp_path, n_train=60)
    config = write_config(tmp_path, train="max_steps: 4")
    assert transformer_mt.train(str(config), str(tmp_path / "run")) == 0
    checkpoint = str(tmp_path / "run" / "checkpoints" / "best.pt")
    translator = transformer_mt.Translator.from_checkpoint(checkpoint, beam_size=2)
    (translation,) = translator.translate(["der hund sieht die katze"])
    assert len(translation.texts) == 1 and isinstance(translation.texts[0], str)
    assert transformer_mt.load_config(str(config)).model.d_model == 32


def test_the_version_is_the_package_metadatas():
    """Written in pyproject.toml and in the package: `tmt --version` says the latter."""
    import tomllib

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text("utf-8"))["project"]["version"]
    assert transformer_mt.__version__ == declared
