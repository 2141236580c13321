"""An update never waits for the device: its figures are read once per metrics row, and an update
whose loss or gradient is not finite is skipped where it was computed.

On the CPU a read costs nothing, so these tests count the reads instead: none inside an update
(through every part of it that training/ owns: loss, backward, clipping, the fused step, the
weight average, the non-finite bookkeeping), one per metrics row in the loop. The model is a
stand-in: ours reads a mask on the CPU on purpose (model/attention.py, `_rows_with_keys`),
where that costs no wait. On CUDA, `torch.cuda.set_sync_debug_mode` checks the real model.
"""

from collections import Counter
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from transformer_mt import kernels
from transformer_mt.config import TrainConfig
from transformer_mt.data.cursor import BatchIterator
from transformer_mt.data.encoding import EncodedCorpus
from transformer_mt.data.token_column import TokenColumn
from transformer_mt.data.tokenizer import PAD_ID
from transformer_mt.errors import TmtError
from transformer_mt.model import build_model
from transformer_mt.training import reporting, update
from transformer_mt.training.loss import fused_label_smoothed_loss
from transformer_mt.training.metrics import read_metrics
from transformer_mt.training.run import run_training
from transformer_mt.training.update import Updater

from ..model.tiny import V, tiny_cfg
from .conftest import write_config, write_corpus

# What hands a tensor's value to Python, and so waits for its device.
READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy")


class StandIn(torch.nn.Module):
    """Logits from the source and target ids by embeddings and a linear layer, with no
    data-dependent branch: called like our model, as `Updater` calls it."""

    pad_id = PAD_ID

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(V, 16)
        self.out = torch.nn.Linear(16, V)

    def forward(self, src_ids, tgt_in_ids, src_mask):
        memory = (self.embed(src_ids) * src_mask[:, 0, 0, :, None]).mean(1, keepdim=True)
        return self.out(torch.tanh(self.embed(tgt_in_ids) + memory))  # (B, T, V)


@pytest.fixture
def batches() -> BatchIterator:
    rng = np.random.default_rng(0)

    def column():
        return TokenColumn.from_lists(
            [rng.integers(4, V, n).tolist() for n in rng.integers(2, 12, 60)]
        )

    return BatchIterator(EncodedCorpus(column(), column()), 120, seed=1)


@contextmanager
def counted_reads(monkeypatch):
    counts: Counter = Counter()
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _name=name, _original=original, **kwargs):
            counts[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    yield counts
    monkeypatch.undo()


def train_config(**changes) -> TrainConfig:
    options = dict(max_steps=20, warmup_steps=2, lr=1e-2, precision="fp32", update_freq=2)
    return TrainConfig(**{**options, **changes})


@pytest.mark.parametrize("policy", ["stop", "skip"])
def test_an_update_reads_nothing_from_the_device(batches, monkeypatch, policy):
    """With clipping and the weight average, accumulating two batches; the first update (the
    optimizer's state is made there) included."""
    cfg = train_config(clip_norm=1.0, ema_decay=0.9, nonfinite_loss=policy)
    updater = Updater(StandIn(), cfg, d_model=16)
    with counted_reads(monkeypatch) as reads:
        for step in (1, 2, 3):
            launched = updater.launch([next(batches), next(batches)], step)
    assert not reads, f"an update read {dict(reads)}"
    assert launched.read().applied and updater.settle() == 0


def test_the_loop_reads_once_per_metrics_row(tmp_path, monkeypatch):
    """12 updates, a row every 4 (and at the first): 4 reads of the figures, none in between;
    the non-finite count is settled at each row and before the checkpoint."""
    write_corpus(tmp_path, n_train=60)
    config = str(write_config(tmp_path, train="max_steps: 12, log_every: 4, valid_every: 12"))
    calls: Counter = Counter()
    for owner, name in [
        (reporting.UpdateTotals, "read"),
        (update.LaunchedUpdate, "read"),
        (update.Updater, "settle"),
    ]:
        original = getattr(owner, name)

        def spy(self, *args, _key=f"{owner.__name__}.{name}", _original=original, **kwargs):
            calls[_key] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(owner, name, spy)
    assert run_training(config, str(tmp_path / "run"), []) == 0
    rows = [r["step"] for r in read_metrics(tmp_path / "run/metrics.jsonl") if r["kind"] == "train"]
    assert rows == [1, 4, 8, 12]
    assert calls["UpdateTotals.read"] == len(rows)
    assert calls["LaunchedUpdate.read"] == 0
    # a row each, then before validating and in the save after it
    assert calls["Updater.settle"] == len(rows) + 2


class Poisoned:
    """The fused loss, times NaN at the given calls (1-based)."""

    def __init__(self, *calls: int) -> None:
        self.calls, self.n = set(calls), 0

    def __call__(self, *args):
        sums = fused_label_smoothed_loss(*args)
        self.n += 1
        if self.n in self.calls:
            sums.loss = sums.loss * float("nan")
        return sums


def snapshot(updater: Updater) -> list[torch.Tensor]:
    state = [t.clone() for t in updater.model.state_dict().values()]
    for values in updater.optimizer.state.values():
        state += [t.clone() for t in values.values()]
    return state + [t.clone() for t in updater.ema.shadow.values()]


@pytest.mark.parametrize("policy", ["stop", "skip"])
def test_a_nonfinite_update_is_skipped_on_the_device(batches, policy):
    """Update 2 (its one batch) has a NaN loss: weights, Adam moments and step count, and the
    weight average stay as update 1 left them; `settle` then counts it or stops the run;
    update 3 trains again."""
    cfg = train_config(update_freq=1, clip_norm=1.0, ema_decay=0.9, nonfinite_loss=policy)
    torch.manual_seed(0)
    model = build_model(tiny_cfg(), V, V, PAD_ID, kernel=kernels.attention)
    updater = Updater(model, cfg, d_model=32, criterion=Poisoned(2))
    updater.launch([next(batches)], 1)
    before = snapshot(updater)
    launched = updater.launch([next(batches)], 2)
    assert not launched.applied
    assert all(torch.equal(a, b) for a, b in zip(before, snapshot(updater), strict=True))
    if policy == "stop":
        with pytest.raises(TmtError, match=r"step 2: loss nan / gradient norm nan is not finite"):
            updater.settle()
    else:
        assert updater.settle() == 1
    assert updater.settle() == 0  # counted once
    assert updater.update([next(batches)], 3).applied
    assert any(not torch.equal(a, b) for a, b in zip(before, snapshot(updater), strict=True))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_an_update_on_cuda_does_not_synchronize(batches):
    """The real model under bf16 autocast: after a first update (allocations, lazy state),
    CUDA's sync debug mode turns any wait for the device inside an update into an error."""
    cfg = train_config(clip_norm=1.0, ema_decay=0.9, precision="bf16")
    model = build_model(tiny_cfg(), V, V, PAD_ID, kernel=kernels.attention)
    updater = Updater(model, cfg, d_model=32, device="cuda")
    updater.launch([next(batches), next(batches)], 1)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in (2, 3):
            launched = updater.launch([next(batches), next(batches)], step)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert launched.read().applied and updater.settle() == 0
