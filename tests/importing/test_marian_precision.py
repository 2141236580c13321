"""`tmt import` of Marian models stored in float16 or bfloat16 (or whose config.json only says
so): the weights are cast to float32, as NLLB's are. transformers 5 computes the position
tables itself, in the dtype it loads (they are not saved), so they are compared with our
sinusoids within that dtype's rounding; a table that is not sinusoidal is still refused."""

import json
import shutil

import pytest
import torch

from tests.corpora import slice_lines
from tests.importing.builders import best_ids, build_marian, generated_ids
from transformer_mt.cli import main
from transformer_mt.errors import TmtError
from transformer_mt.inference.translator import Translator
from transformer_mt.interop.hf_marian import from_marian_weights
from transformer_mt.model.embeddings import sinusoidal_table

transformers = pytest.importorskip("transformers")

STEPS = 12  # tokens each greedy search may produce


@pytest.fixture(scope="module")
def float32_dir(tmp_path_factory):
    """A bilingual OPUS-MT-shaped model saved in float32."""
    directory = tmp_path_factory.mktemp("precision") / "hf"
    build_marian(directory, separate=True)
    return directory


def stored_in(source, directory, dtype):
    """A copy of the model directory `source` whose weights are saved in `dtype`."""
    shutil.copytree(source, directory)
    transformers.MarianMTModel.from_pretrained(source).to(dtype).save_pretrained(directory)
    return directory


def said_float16(source, directory):
    """A copy of `source` (float32 weights) whose config.json says dtype float16, which
    transformers 5 then loads in float16."""
    shutil.copytree(source, directory)
    config = json.loads((directory / "config.json").read_text("utf-8"))
    config.update(dtype="float16", torch_dtype="float16")
    (directory / "config.json").write_text(json.dumps(config), "utf-8")
    return directory


@pytest.mark.parametrize("stored", ["float16", "bfloat16", "config says float16"])
def test_a_half_precision_model_translates_as_its_float32_cast(float32_dir, tmp_path, stored):
    if stored == "config says float16":
        directory = said_float16(float32_dir, tmp_path / "hf")
    else:
        directory = stored_in(float32_dir, tmp_path / "hf", getattr(torch, stored))
    out = tmp_path / "imported.pt"
    assert main(["import", str(directory), "--out", str(out)]) == 0
    # Cast to float32 on loading: transformers then computes its positions in float32 too.
    model = transformers.MarianMTModel.from_pretrained(directory, dtype=torch.float32).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
    lines = slice_lines("test2016", "de")[:30]
    translator = Translator.from_checkpoint(str(out), beam_size=1, max_len_a=0.0, max_len_b=STEPS)
    inputs = tokenizer(lines, padding=True, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=STEPS)
    theirs = generated_ids(generated, model.config.pad_token_id)
    assert best_ids(translator, lines) == theirs


def test_a_float16_table_that_is_not_sinusoidal_is_refused(float32_dir):
    """Positions numbered from 1, in float16: each row within float16's rounding of another
    sinusoid, not ours. (transformers' own tables pass: the test above.)"""
    model = transformers.MarianMTModel.from_pretrained(float32_dir).half()
    state = model.state_dict()
    config = model.config
    shifted = sinusoidal_table(config.max_position_embeddings, config.d_model, offset=1)
    state["model.encoder.embed_positions.weight"] = shifted.half()
    with pytest.raises(TmtError) as refused:
        from_marian_weights(config, state)
    assert str(refused.value) == (
        "cannot map from Marian: model.encoder.embed_positions.weight is not the sinusoidal table"
    )
