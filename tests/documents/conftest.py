"""A tiny model that writes several words per line, and a Translator of it."""

import random

import pytest
import torch

from transformer_mt.artifacts import load_for_inference
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID
from transformer_mt.inference.translator import Translator

from ..conftest import WORDS, save_tiny_checkpoint


@pytest.fixture(scope="session")
def reversing_checkpoint(tmp_path_factory):
    """The tiny test model after 150 full-batch Adam steps on reversing the word order of short
    sentences of WORDS.

    Untrained, it writes one long run of pieces, a single "word" that leaves a document's inline
    markup nothing to go around; a little training gives translations of several words, so
    that placing markup is exercised. The tests compare with what this model translates, never
    with a reference.
    """
    directory = tmp_path_factory.mktemp("reversing")
    path = save_tiny_checkpoint(directory)
    state = torch.load(path, weights_only=True)
    bundle = load_for_inference(path)
    model, tokenizer = bundle.model, bundle.src_tokenizer
    rng = random.Random(0)
    texts = [" ".join(rng.sample(WORDS, rng.randint(2, 7))) for _ in range(64)]
    src = _pad([tokenizer.encode(text) + [EOS_ID] for text in texts])
    tgt = [tokenizer.encode(" ".join(text.split()[::-1])) for text in texts]
    tgt_in, tgt_out = _pad([[BOS_ID, *t] for t in tgt]), _pad([[*t, EOS_ID] for t in tgt])
    torch.manual_seed(0)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        logits = model(src, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    state["model"] = model.state_dict()
    trained = directory / "trained.pt"
    torch.save(state, trained)
    return trained


@pytest.fixture
def translator(reversing_checkpoint):
    """Greedy, as `tmt translate --beam-size 1` would load it."""
    return Translator.from_checkpoint(str(reversing_checkpoint), beam_size=1)


def _pad(rows: list[list[int]]) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([row + [0] * (width - len(row)) for row in rows])
