"""`tmt export --format hf`: the exported Marian model and tokenizer reproduce ours."""

import pytest
import torch
from torch.testing import assert_close

from transformer_mt.cli import main
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID
from transformer_mt.training.checkpoint import load_for_inference

transformers = pytest.importorskip("transformers")


def test_hf_export_matches_logits_and_tokenization(checkpoint, tmp_path):
    out = tmp_path / "hf"
    assert main(["export", str(checkpoint), str(out), "--format", "hf"]) == 0
    ours = load_for_inference(checkpoint)
    hf = transformers.MarianMTModel.from_pretrained(out).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(out)
    sentences = ["ein mann fährt rad", "das buch"]
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    for row, sentence in zip(batch.input_ids.tolist(), sentences, strict=True):
        expected = ours.src_tokenizer.encode(sentence) + [EOS_ID]
        assert row[: len(expected)] == expected
    tgt = torch.tensor([[BOS_ID, 5, 6, 7], [BOS_ID, 8, 9, 10]])
    with torch.no_grad():
        theirs = hf(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=tgt
        ).logits
        assert_close(theirs, ours.model(batch.input_ids, tgt), atol=1e-4, rtol=1e-4)


def test_export_refuses_quantized_hf(checkpoint, tmp_path, capsys):
    assert (
        main(["export", str(checkpoint), str(tmp_path), "--format", "hf", "--quantize", "int8"])
        == 2
    )
    assert "ctranslate2 only" in capsys.readouterr().err
