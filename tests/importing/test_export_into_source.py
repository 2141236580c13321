"""An export into the model directory a checkpoint was imported from is refused: it would
replace that model's files (config.json, generation_config.json, the tokenizer's)."""

import pytest

from tests.conftest import without_notes
from tests.importing.builders import build_marian
from transformer_mt.cli import main

pytest.importorskip("transformers")


@pytest.mark.parametrize("fmt", ["hf", "ctranslate2"])
def test_an_export_into_the_directory_imported_from_is_refused(tmp_path, capsys, fmt):
    if fmt == "ctranslate2":
        pytest.importorskip("ctranslate2")
    source = tmp_path / "hf"
    build_marian(source, separate=True)
    checkpoint = tmp_path / "imported.pt"
    assert main(["import", str(source), "--out", str(checkpoint)]) == 0
    capsys.readouterr()
    before = {path.name: path.read_bytes() for path in source.iterdir()}
    assert main(["export", "--format", fmt, str(checkpoint), str(source)]) == 2
    assert without_notes(capsys.readouterr().err).strip() == (
        f"error: {source}: holds the model checkpoint {checkpoint} was imported from "
        f"({source}); write into a new directory"
    )
    assert {path.name: path.read_bytes() for path in source.iterdir()} == before
