"""Batches padded to multiples (`train.pad_to_multiple`) train as the unpadded ones do: the same
loss and gradient, the same updates, and a run with them resumes exactly."""

import os

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from transformer_mt import kernels
from transformer_mt.artifacts import load_checkpoint
from transformer_mt.config import TrainConfig
from transformer_mt.data.batching import collate
from transformer_mt.data.encoding import EncodedCorpus
from transformer_mt.data.token_column import TokenColumn
from transformer_mt.data.tokenizer import PAD_ID
from transformer_mt.machine import TRAINING_PRIMITIVES
from transformer_mt.model import build_model
from transformer_mt.training.loss import fused_label_smoothed_loss
from transformer_mt.training.run import run_training
from transformer_mt.training.update import Updater

from ..model.tiny import OPTIONS, V, tiny_cfg
from .conftest import write_config, write_corpus
from .ddp_worker import assert_trained_alike
from .test_trainer import assert_same_training_state


@pytest.fixture(scope="module")
def corpus() -> EncodedCorpus:
    """Pairs of 1-20 tokens: padded to 8, most batches gain a few pad columns."""
    rng = np.random.default_rng(3)

    def column():
        return TokenColumn.from_lists(
            [rng.integers(4, V, n).tolist() for n in rng.integers(1, 21, 48)]
        )

    return EncodedCorpus(column(), column())


def loss_and_gradient(model, batch):
    model.zero_grad()
    logits = model(batch.src_ids, batch.tgt_in_ids, batch.src_mask)
    sums = fused_label_smoothed_loss(logits, batch.tgt_out_ids, 0.1, PAD_ID)
    sums.loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return sums.loss.detach(), sums.nll, grads


@pytest.mark.parametrize(
    "options",
    [*OPTIONS, dict(positions="rope"), dict(positions="t5"), dict(positions="alibi")],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_a_padded_batch_has_the_loss_and_gradient_of_the_unpadded_one(corpus, options):
    torch.manual_seed(0)
    model = build_model(tiny_cfg(**options), V, V, PAD_ID, kernel=kernels.attention)
    short = (corpus.src.lengths < 12) & (corpus.tgt.lengths < 12)
    indices = np.flatnonzero(short)[:8]  # padded to 16 columns, within the corpus' 21
    plain, padded = (collate(corpus, indices, pad_to_multiple=m) for m in (1, 8))
    assert padded.src_ids.shape[1] > plain.src_ids.shape[1]
    assert padded.tgt_in_ids.shape[1] > plain.tgt_in_ids.shape[1]
    loss, nll, grads = loss_and_gradient(model, plain)
    padded_loss, padded_nll, padded_grads = loss_and_gradient(model, padded)
    assert_close(padded_loss, loss, rtol=1e-5, atol=1e-5)
    assert_close(padded_nll, nll, rtol=1e-5, atol=1e-5)
    assert padded_grads.keys() == grads.keys()
    # Gradients of a summed loss reach ~10; float32 sums taken in another order differ by ~5e-6.
    for name, grad in grads.items():
        assert_close(padded_grads[name], grad, rtol=1e-4, atol=5e-5, msg=name)


def test_updates_on_padded_batches_move_the_weights_as_unpadded_ones(corpus):
    """Three updates of two accumulated batches each, with clipping and the weight average."""
    cfg = TrainConfig(max_steps=10, warmup_steps=2, lr=1e-2, clip_norm=1.0, ema_decay=0.9)
    weights = []
    for multiple in (1, 8):
        torch.manual_seed(0)
        model = build_model(tiny_cfg(), V, V, PAD_ID, kernel=kernels.attention)
        updater = Updater(model, cfg, 32)
        for step in range(1, 4):
            rows = [np.arange(16 * step - 16, 16 * step - 8), np.arange(16 * step - 8, 16 * step)]
            batches = [collate(corpus, r, pad_to_multiple=multiple) for r in rows]
            result = updater.update(batches, step)
            assert result.applied
        weights.append(model.state_dict())
    assert_trained_alike(weights[1], weights[0])


@pytest.mark.parametrize("streaming", [False, True], ids=["in_memory", "streamed"])
def test_a_run_on_padded_batches_resumes_exactly(tmp_path, streaming):
    """As tests/training/test_trainer.py's resume tests, with train.pad_to_multiple: 8; the key
    reaches the batches (the run ends elsewhere than one padded to the longest row)."""
    write_corpus(tmp_path, n_train=120)
    train = "update_freq: 2, keep_last: 10, pad_to_multiple: 8"
    config = str(write_config(tmp_path, train=train))
    extra = ["data.streaming=true", "data.shuffle_buffer=32", "data.workers=0"] if streaming else []
    full, part, plain = tmp_path / "full", tmp_path / "part", tmp_path / "plain"
    assert run_training(config, str(full), extra) == 0
    assert run_training(config, str(part), [*extra, "train.max_steps=6"]) == 0
    assert run_training(config, str(part), extra) == 0
    expected = load_checkpoint(full / "checkpoints/last.pt")
    assert expected.training.data_position["epoch"] >= 1
    assert_same_training_state(load_checkpoint(part / "checkpoints/last.pt"), expected)
    assert run_training(config, str(plain), [*extra, "train.pad_to_multiple=1"]) == 0
    unpadded = load_checkpoint(plain / "checkpoints/last.pt").model
    assert any(not torch.equal(unpadded[k], v) for k, v in expected.model.items())


def test_a_run_on_the_cpu_bounds_ondnns_kept_primitives(tmp_path, monkeypatch):
    """Whatever the padding, a CPU run keeps few oneDNN primitives (`machine.
    bound_primitive_cache`: the memory new batch shapes cost), unless the user chose."""
    write_corpus(tmp_path, n_train=40)
    config = str(write_config(tmp_path, train="max_steps: 4"))
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    assert run_training(config, str(tmp_path / "run"), ["train.device=cpu"]) == 0
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(TRAINING_PRIMITIVES)
