"""scripts/backtranslation.sh end to end on the shipped Multi30k slice: the reverse model, the
back-translation of the monolingual half, the four de->en trainings (the tagged one with its
tag), and the table."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.corpora import MULTI30K_SLICE, REPO
from transformer_mt.data.specials import BACK_TRANSLATION_TAG
from transformer_mt.data.tokenizer import Tokenizer

TINY = (
    "model.d_model=32 model.d_ff=64 model.n_heads=2 model.n_layers=1 tokenizer.vocab_size=300 "
    "train.warmup_steps=1 train.valid_max_sentences=5 train.max_tokens=512 decode.beam_size=1 "
    f"data.valid={MULTI30K_SLICE}/valid data.test={MULTI30K_SLICE}/test2016"
)


@pytest.mark.slow
def test_the_recipe_runs_on_a_slice(tmp_path):
    out = tmp_path / "bt"
    env = {
        **os.environ,
        "PY": sys.executable,
        "CORPUS": str(MULTI30K_SLICE / "train"),
        "OUT": str(out),
        "STEPS": "3",
        "BT_WEIGHT": "0.5",
        "SET": f"{TINY} data.cache_dir={tmp_path / 'cache'}",
    }
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "backtranslation.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    table = done.stdout.splitlines()
    assert table[0] == "| training data | test BLEU | chrF |"
    assert [row.split(" | ")[0] for row in table[2:]] == [
        "| en->de, 150 real pairs (the back-translator)",
        "| de->en, 150 real pairs",
        "| de->en, 150 real + 150 back-translated",
        "| de->en, 150 real + 150 back-translated, tagged",
        "| de->en, 300 real pairs",
    ]
    synthetic = (out / "data" / "synthetic.de").read_text("utf-8").splitlines()
    mono = (out / "data" / "mono.en").read_text("utf-8").splitlines()
    assert len(synthetic) == len(mono) == 150
    assert mono == (MULTI30K_SLICE / "train.en").read_text("utf-8").splitlines()[150:]
    for name, tagged in (("half_bt", False), ("half_tagged_bt", True)):
        checkpoint = torch.load(
            out / name / "checkpoints" / "best.pt", map_location="cpu", weights_only=False
        )
        sources = checkpoint["config"]["data"]["train"]
        assert [(Path(s["path"]).name, s["weight"], s["tagged"]) for s in sources] == [
            ("real", 1.0, False),
            ("synthetic", 0.5, tagged),
        ]
        model = next((out / name).glob("spm-joint-*.model"))
        has_tag = Tokenizer.load(model).piece_id(BACK_TRANSLATION_TAG) != 1
        assert has_tag == tagged
