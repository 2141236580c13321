"""train.cuda_graphs: the update a CUDA graph records is the plain update, fed its learning rate,
step number and token scale as tensors on the device.

Capture itself needs CUDA (tests/gpu/test_cuda.py replays graphs against eager updates); here
`CapturedUpdates(capture=False)` runs the very update a graph would record, eagerly, on each
shape's reused input buffers, and must give the plain update's weights, figures and optimizer
state bit for bit. The configurations graphs cannot serve are refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from transformer_mt import kernels
from transformer_mt.cli import main
from transformer_mt.config import TrainConfig
from transformer_mt.config.errors import ConfigError
from transformer_mt.data.cursor import BatchIterator
from transformer_mt.data.encoding import EncodedCorpus
from transformer_mt.data.token_column import TokenColumn
from transformer_mt.data.tokenizer import PAD_ID
from transformer_mt.errors import TmtError
from transformer_mt.model import build_model
from transformer_mt.training.graphs import CapturedUpdates
from transformer_mt.training.update import Updater

from ..model.tiny import V, tiny_cfg
from .conftest import write_config, write_corpus


def batch_list(n: int) -> list:
    """`n` batches with few distinct shapes (lengths padded to multiples of 4), so that shapes
    come back as they do in an epoch."""
    rng = np.random.default_rng(0)

    def column():
        lengths = rng.integers(2, 12, 80)
        return TokenColumn.from_lists([rng.integers(4, V, k).tolist() for k in lengths])

    iterator = BatchIterator(EncodedCorpus(column(), column()), 96, seed=1, pad_to_multiple=4)
    return [next(iterator) for _ in range(n)]


def updater(**changes) -> Updater:
    torch.manual_seed(0)
    model = build_model(tiny_cfg(dropout=0.1), V, V, PAD_ID, kernel=kernels.attention)
    options = dict(max_steps=50, warmup_steps=3, lr=5e-3, precision="fp32", ema_decay=0.9)
    return Updater(model, TrainConfig(**{**options, **changes}), d_model=32)


def test_the_recorded_update_equals_the_plain_one_bit_for_bit():
    batches = batch_list(14)
    shapes = {(*b.src_ids.shape, *b.tgt_in_ids.shape) for b in batches}
    assert len(shapes) < len(batches)  # some shapes come back: their buffers are reused
    plain, fed = updater(clip_norm=1.0), updater(clip_norm=1.0)
    fed.graphs = CapturedUpdates(fed, capture=False)
    for step, batch in enumerate(batches, start=1):
        torch.manual_seed(step)  # the same dropout masks for both
        a = plain.launch([batch], step).read()
        torch.manual_seed(step)
        b = fed.launch([batch], step).read()
        assert a == b, f"step {step}"
    assert len(fed.graphs.shapes) == len(shapes) and fed.graphs.captured == 0
    for p, q in zip(plain.model.parameters(), fed.model.parameters(), strict=True):
        assert torch.equal(p, q)
    for name, shadow in plain.ema.shadow.items():
        assert torch.equal(shadow, fed.ema.shadow[name])
    states = plain.optimizer.state_dict()["state"], fed.optimizer.state_dict()["state"]
    for index, state in states[0].items():
        for key, value in state.items():
            assert torch.equal(value, states[1][index][key]), (index, key)


def test_a_non_finite_update_is_skipped_and_named_through_the_fed_step():
    fed = updater(nonfinite_loss="stop")
    fed.graphs = CapturedUpdates(fed, capture=False)
    batches = batch_list(3)
    fed.launch([batches[0]], 1)
    with torch.no_grad():
        next(fed.model.parameters()).fill_(float("nan"))  # every later loss is NaN
    poisoned = [p.detach().clone() for p in fed.model.parameters()]
    launched = fed.launch([batches[1]], 2)
    assert not launched.read().applied
    for p, q in zip(poisoned, fed.model.parameters(), strict=True):
        assert torch.equal(p, q) or (p.isnan().all() and q.isnan().all())
    with pytest.raises(TmtError, match="step 2: loss nan"):
        fed.settle()


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"update_freq": 2}, "train.update_freq"),
        ({"precision": "fp16"}, "train.precision"),
        ({"compile": True}, "train.compile"),
    ],
)
def test_what_graphs_cannot_record_is_refused_by_name(changes, key):
    cfg = TrainConfig(cuda_graphs=True, **changes)
    with pytest.raises(ConfigError, match=key) as error:
        cfg.validate()
    assert "train.cuda_graphs" in str(error.value) and key in error.value.keys


def test_graphs_on_a_cpu_are_refused_in_one_line():
    with pytest.raises(TmtError, match="train.cuda_graphs needs one process on a CUDA device"):
        updater(cuda_graphs=True)


def test_tmt_train_with_graphs_on_a_cpu_stops_in_one_line(tmp_path, capsys):
    write_corpus(tmp_path, n_train=40)
    config = str(write_config(tmp_path, train="max_steps: 4, device: cpu"))
    args = ["train", "--config", config, "--run-dir", str(tmp_path / "run")]
    assert main([*args, "--set", "train.cuda_graphs=true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: train.cuda_graphs needs one process on a CUDA device")
    assert "Traceback" not in "".join(err)
