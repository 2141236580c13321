"""Special ids come from the checkpoint: a model whose bos and eos sit at other ids translates
exactly as before when its checkpoint says so, and differently when it does not."""

import pytest
import torch

from transformer_mt.artifacts import load_checkpoint, load_for_inference, save_checkpoint
from transformer_mt.data.specials import SpecialTokens
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer_mt.errors import TmtError
from transformer_mt.inference.translator import Translator

LINES = ["ein hund läuft", "die katze schläft auf dem sofa", "ein mann"]


def swapped_checkpoint(checkpoint, tmp_path, specials):
    """The checkpoint with embedding and output rows of bos and eos exchanged, and `specials`
    (None: none recorded)."""
    saved = load_checkpoint(checkpoint)
    vocab = load_for_inference(checkpoint).src_tokenizer.vocab_size
    order = torch.arange(vocab)
    order[[BOS_ID, EOS_ID]] = torch.tensor([EOS_ID, BOS_ID])
    for name, tensor in saved.model.items():
        if tensor.dim() >= 1 and tensor.size(0) == vocab:  # embeddings, output projection
            saved.model[name] = tensor[order].clone()
    saved.specials = None if specials is None else specials.to_dict()
    path = tmp_path / f"swapped-{specials is not None}.pt"
    save_checkpoint(saved, path)
    return path


def translations(path, **decode):
    """Texts and scores; the scores rounded: a softmax over permuted rows sums in another
    order."""
    translator = Translator.from_checkpoint(str(path), max_len_a=0.0, max_len_b=8, **decode)
    return [(t.texts, [round(s, 4) for s in t.scores]) for t in translator.translate(LINES)]


@pytest.mark.parametrize("decode", [{"beam_size": 1}, {"beam_size": 3, "n_best": 2}])
def test_a_model_with_other_special_ids_translates_by_its_checkpoint(checkpoint, tmp_path, decode):
    swapped = SpecialTokens(bos=EOS_ID, eos=BOS_ID, never=(PAD_ID, EOS_ID))
    expected = translations(checkpoint, **decode)
    assert translations(swapped_checkpoint(checkpoint, tmp_path, swapped), **decode) == expected
    # Read with this toolkit's own ids, the same weights translate otherwise.
    assert translations(swapped_checkpoint(checkpoint, tmp_path, None), **decode) != expected


def test_special_tokens_round_trip_and_bad_fields_are_named(checkpoint, tmp_path):
    tags = SpecialTokens(pad=5, unk=1, bos=5, eos=0, never=(5,), language_tags={"fra": 7})
    assert SpecialTokens.from_dict(tags.to_dict(), "x") == tags
    assert SpecialTokens.from_dict(None, "x") == SpecialTokens()
    for data, named in (
        ({**tags.to_dict(), "eos": -1}, "eos"),
        ({**tags.to_dict(), "bos": "2"}, "bos"),
        ({**tags.to_dict(), "never": [1, None]}, "never"),
        ({**tags.to_dict(), "colour": 1}, "colour"),
    ):
        with pytest.raises(TmtError, match=named):
            SpecialTokens.from_dict(data, "model.pt")
    saved = load_checkpoint(checkpoint)
    saved.specials = SpecialTokens(eos=10_000).to_dict()
    path = tmp_path / "outside.pt"
    save_checkpoint(saved, path)
    with pytest.raises(TmtError, match=r"outside.pt: special tokens: eos=10000 is outside the"):
        load_for_inference(path)


def test_our_ids_are_one_set_in_search_and_in_checkpoints():
    """search/options.py repeats the ids (search imports no data): they must stay the same."""
    from transformer_mt.search.options import OWN_IDS

    ours = SpecialTokens()
    assert (OWN_IDS.pad, OWN_IDS.bos, OWN_IDS.eos, OWN_IDS.never) == (
        ours.pad, ours.bos, ours.eos, ours.never
    )  # fmt: skip
    assert (ours.pad, ours.unk, ours.bos, ours.eos) == (PAD_ID, 1, BOS_ID, EOS_ID)
