"""The CUDA paths: mixed-precision training, flash and flex attention, search, DDP over NCCL.

Marked `gpu`: skipped without CUDA. TMT_GPU_TEST_DEVICE=cpu runs them on the CPU as a dry run
(bf16 only: the Trainer refuses fp16 on CPU), so API mistakes show up before a GPU is lent;
TMT_GPU_TEST_DEVICE=cuda makes a missing CUDA a failure instead of a skip (scripts/gpu_check.sh).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.testing import assert_close

from transformer_mt.artifacts import load_checkpoint
from transformer_mt.config import DecodeConfig, ExperimentConfig, ModelConfig, TrainConfig
from transformer_mt.data.batching import collate
from transformer_mt.data.cursor import BatchIterator
from transformer_mt.data.encoding import EncodedCorpus
from transformer_mt.data.pipeline import TrainData
from transformer_mt.data.token_column import TokenColumn
from transformer_mt.data.tokenizer import PAD_ID
from transformer_mt.model import build_model
from transformer_mt.model.attention import attention
from transformer_mt.search import SearchOptions, search
from transformer_mt.training.distributed import DistributedContext
from transformer_mt.training.graphs import CapturedUpdates
from transformer_mt.training.metrics import read_metrics
from transformer_mt.training.run import run_training
from transformer_mt.training.trainer import Placement, Trainer
from transformer_mt.training.update import Updater, UpdateResult

from ..model.tiny import BOS, V, padded_batch, tiny_cfg
from ..test_search import padded, random_sources, tiny_model
from ..training.conftest import write_config, write_corpus

REPO = Path(__file__).resolve().parents[2]
REQUESTED = os.environ.get("TMT_GPU_TEST_DEVICE", "")
DRY_RUN = REQUESTED == "cpu"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not (DRY_RUN or REQUESTED == "cuda" or torch.cuda.is_available()),
        reason="needs CUDA (TMT_GPU_TEST_DEVICE=cpu: dry run on the CPU)",
    ),
]


@pytest.fixture
def device() -> torch.device:
    if DRY_RUN:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        pytest.fail("TMT_GPU_TEST_DEVICE=cuda but torch.cuda.is_available() is False")
    # An index, as run.py gives under torchrun: DDP's device_ids need one.
    return torch.device("cuda", 0)


def skip_fp16_on_cpu(precision: str, device: torch.device) -> None:
    if precision == "fp16" and device.type == "cpu":
        pytest.skip("fp16 autocast needs CUDA (the Trainer refuses it on the CPU)")


# --- a. mixed precision through the real Trainer ----------------------------------------------


def tiny_trainer(
    run_dir: Path,
    device: torch.device,
    precision: str = "fp32",
    dist_context: DistributedContext | None = None,
) -> Trainer:
    """Same weights and batches on every call: d_model 32, vocabulary 50, no dropout."""
    rng = np.random.default_rng(0)
    rows = [rng.integers(4, 50, rng.integers(3, 12)).tolist() for _ in range(96)]
    corpus = EncodedCorpus(TokenColumn.from_lists(rows), TokenColumn.from_lists(rows[::-1]))
    config = ExperimentConfig(
        model=ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0),
        train=TrainConfig(
            max_steps=3, max_tokens=64, lr=1e-3, warmup_steps=1, precision=precision,
            valid_bleu=False, log_every=1, valid_every=3, clip_norm=1.0,
        ),
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_model(config.model, 50, 50, PAD_ID)
    data = TrainData(BatchIterator(corpus, 64, seed=1), [collate(corpus, np.arange(8))], None, [])
    # Checkpoints need only the bytes (non-empty: torch.load(weights_only) refuses b"").
    tokenizer = SimpleNamespace(model_bytes=b"unused", table=None)
    place = Placement(device, dist_context)
    return Trainer(config, model, data, (tokenizer, tokenizer), run_dir, place=place)


def next_update(trainer: Trainer) -> UpdateResult:
    """The trainer's next update: its next batches, its next step number."""
    trainer.step += 1
    batches = [next(trainer.data.train) for _ in range(trainer.cfg.update_freq)]
    return trainer.updater.update(batches, trainer.step)


def first_loss(trainer: Trainer) -> float:
    result = next_update(trainer)
    return result.loss / result.tokens


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_autocast_step_is_finite_near_fp32_and_updates(precision, device, tmp_path):
    skip_fp16_on_cpu(precision, device)
    reference = first_loss(tiny_trainer(tmp_path / "fp32", device))
    trainer = tiny_trainer(tmp_path / precision, device, precision)
    start = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    loss = first_loss(trainer)
    assert np.isfinite(loss) and loss == pytest.approx(reference, rel=0.05)
    for _ in range(2):  # fp16: a first overflow only lowers the GradScaler's scale
        next_update(trainer)
    state = trainer.model.state_dict()
    assert all(torch.isfinite(v).all() for v in state.values())
    assert any(not torch.equal(start[k], state[k]) for k in start), "no parameter moved"


def graph_updaters(device: torch.device) -> tuple[Updater, Updater]:
    """(eager, graphed) updaters of the same tiny model in bf16 on `device`; on the CPU (dry
    run) the graphed one runs the update a graph would record, uncaptured."""
    made = []
    for graphs in (False, device.type == "cuda"):
        torch.manual_seed(0)
        model = build_model(tiny_cfg(), V, V, PAD_ID)
        cfg = TrainConfig(max_steps=40, warmup_steps=4, lr=2e-3, precision="bf16",
                          clip_norm=1.0, ema_decay=0.9, cuda_graphs=graphs)  # fmt: skip
        made.append(Updater(model, cfg, d_model=32, device=device))
    if device.type == "cpu":
        made[1].graphs = CapturedUpdates(made[1], capture=False)
    return made[0], made[1]


def test_updates_replayed_from_cuda_graphs_equal_eager_ones(device):
    """20 updates over a few batch shapes (no dropout: replays draw their own random
    numbers): one graph per shape, every later update on it a replay, the same figures and
    weights as eager updates."""
    rng = np.random.default_rng(0)
    rows = [rng.integers(4, V, rng.integers(3, 12)).tolist() for _ in range(120)]
    corpus = EncodedCorpus(TokenColumn.from_lists(rows), TokenColumn.from_lists(rows[::-1]))
    iterator = BatchIterator(corpus, 96, seed=1, pad_to_multiple=8)
    batches = [next(iterator) for _ in range(20)]
    eager, graphed = graph_updaters(device)
    for step, batch in enumerate(batches, start=1):
        a, b = eager.update([batch], step), graphed.update([batch], step)
        assert b.applied and b.loss == pytest.approx(a.loss, rel=1e-4), step
        assert b.grad_norm == pytest.approx(a.grad_norm, rel=1e-3), step
    shapes = {(*b.src_ids.shape, *b.tgt_in_ids.shape) for b in batches}
    assert len(graphed.graphs.shapes) == len(shapes) < len(batches)
    assert graphed.graphs.captured == (len(shapes) if device.type == "cuda" else 0)
    for p, q in zip(eager.model.parameters(), graphed.model.parameters(), strict=True):
        assert_close(q, p, rtol=1e-4, atol=1e-5)


def test_training_with_cuda_graphs_runs_validates_and_resumes(device, tmp_path):
    if device.type != "cuda":
        pytest.skip("train.cuda_graphs needs CUDA (the update it records is checked above)")
    write_corpus(tmp_path)
    config = write_config(tmp_path, train="device: cuda, precision: bf16")
    run_dir, base = tmp_path / "run", ["train.cuda_graphs=true", "train.pad_to_multiple=8"]
    first = [*base, "train.max_steps=30", "train.warmup_steps=5", "train.valid_every=15"]
    assert run_training(str(config), str(run_dir), first) == 0
    more = [*base, "train.max_steps=40", "train.warmup_steps=5", "train.valid_every=15"]
    assert run_training(str(config), str(run_dir), more) == 0  # resumed
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state.step == 40 and all(torch.isfinite(t).all() for t in state.model.values())
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]
    assert rows[-1]["step"] == 40 and np.isfinite(rows[-1]["loss"])


# --- b. flash attention really runs our call ------------------------------------------------


@pytest.mark.parametrize("n_kv_heads", [4, 2])  # 2: grouped-query attention
@pytest.mark.parametrize("is_causal", [False, True])
def test_flash_attention_runs_and_matches_math(is_causal, n_kv_heads, device):
    """Under sdpa_kernel(FLASH_ATTENTION) SDPA raises rather than fall back to another kernel."""
    torch.manual_seed(0)
    q = torch.randn(2, 4, 128, 64, device=device, dtype=torch.bfloat16)  # (B, H, T, Dh)
    k, v = (torch.randn(2, n_kv_heads, 128, 64, device=device, dtype=torch.bfloat16) for _ in "kv")
    grad = torch.randn_like(q)
    results = {}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        with sdpa_kernel(backend):
            out = attention(*inputs, mask=None, is_causal=is_causal)
            out.backward(grad)
        results[backend] = [out, *(t.grad for t in inputs)]
    for got, expected in zip(*results.values(), strict=True):
        assert_close(got, expected, atol=5e-2, rtol=2e-2)


# --- c. compiled flex attention equals SDPA ---------------------------------------------------


@pytest.mark.parametrize("positions", ["sinusoidal", "t5", "alibi"])
def test_flex_local_model_equals_sdpa_model(device, positions):
    """The CPU version is tests/model/test_flex.py; on CUDA flex is compiled (Triton).

    Head size 16, the least compiled flex accepts; 300 source tokens span three 128-key blocks.
    t5 and alibi enter through flex's score_mod (t5's bias is learned: its gradient flows
    through the tensor the score_mod reads). Gradients are compared on CUDA only (eager flex
    on the CPU has no backward).
    """
    options = dict(d_model=64, n_heads=4, d_ff=128, max_positions=512, positions=positions)
    options.update(attention_pattern="local", attention_window=16)
    torch.manual_seed(0)
    sdpa = build_model(tiny_cfg(**options), V).to(device).eval()
    flex = build_model(tiny_cfg(**options, attention_backend="flex"), V).to(device).eval()
    flex.load_state_dict(sdpa.state_dict())
    src, tgt = padded_batch([300, 170, 9]).to(device), torch.randint(4, V, (3, 200), device=device)
    tgt[:, 0] = BOS
    backward = device.type == "cuda"
    logits = {}
    for name, model in (("sdpa", sdpa), ("flex", flex)):
        with torch.set_grad_enabled(backward):
            logits[name] = model(src, tgt)
        if backward:
            logits[name].square().mean().backward()
    assert_close(logits["flex"], logits["sdpa"], atol=1e-4, rtol=1e-4)
    if not backward:
        return
    for (name, p_flex), p_sdpa in zip(flex.named_parameters(), sdpa.parameters(), strict=True):
        assert_close(p_flex.grad, p_sdpa.grad, atol=1e-5, rtol=1e-3, msg=name)


# --- d. beam search on the device equals the CPU ----------------------------------------------


def test_beam_search_on_device_equals_cpu(device):
    """min_len 4: hypotheses of 4-7 tokens. These beams stayed the same when every weight was
    perturbed by 1e-5 (relative) on the CPU, far more than CUDA's float32 differences."""
    model = tiny_model()
    src_ids, src_mask = padded(random_sources(8, vocab_size=20, seed=4))
    cfg = DecodeConfig(beam_size=5, n_best=3, max_len_a=1.0, max_len_b=5, min_len=4)
    options = SearchOptions(max_len_cap=model.cfg.max_positions)
    expected = search(model, src_ids, src_mask, cfg, options)
    on_device = copy.deepcopy(model).to(device)
    got = search(on_device, src_ids.to(device), src_mask.to(device), cfg, options)
    assert [[h.tokens for h in r.hypotheses] for r in got] == [
        [h.tokens for h in r.hypotheses] for r in expected
    ]
    scores = [torch.tensor([[h.score for h in r.hypotheses] for r in rs]) for rs in (got, expected)]
    assert_close(*scores, atol=1e-4, rtol=1e-4)


def test_beam_search_through_the_paged_cache_on_device_equals_cpu_dense(device):
    """The server's paged KV cache (block pool, forks, copy-on-write) on the device."""
    import functools

    from transformer_mt.serve.engine.paged import BlockPool, PagedDecoderCache

    model = tiny_model()
    src_ids, src_mask = padded(random_sources(8, vocab_size=20, seed=4))
    cfg = DecodeConfig(beam_size=5, n_best=3, max_len_a=1.0, max_len_b=5, min_len=4)
    expected = search(model, src_ids, src_mask, cfg, SearchOptions(max_len_cap=64))
    on_device = copy.deepcopy(model).to(device)
    pool = BlockPool.for_model(model.cfg, 400, 2, device=device)
    new_cache = functools.partial(PagedDecoderCache, pool, model.cfg.decoder_layers)
    options = SearchOptions(max_len_cap=64, new_cache=new_cache)
    got = search(on_device, src_ids.to(device), src_mask.to(device), cfg, options)
    assert [[h.tokens for h in r.hypotheses] for r in got] == [
        [h.tokens for h in r.hypotheses] for r in expected
    ]


# --- e. data parallel: torchrun, and the Trainer's collectives over NCCL ----------------------


def test_torchrun_one_process_trains_and_checkpoints(device, tmp_path):
    """`torchrun --nproc_per_node 1 -m transformer_mt train` end to end on the device.

    With one process WORLD_SIZE is 1 and training stays single-process (run.py joins no group);
    the next test drives the NCCL collectives and the DDP wrapper.
    """
    write_corpus(tmp_path)
    precision = "fp32" if device.type == "cpu" else "bf16"
    config = write_config(tmp_path, train=f"device: {device.type}, precision: {precision}")
    run_dir = tmp_path / "run"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
    cmd = [*launcher, "1", "-m", "transformer_mt", "train", "--config", str(config)]
    cmd += ["--run-dir", str(run_dir), "--set", "train.max_steps=4", "train.valid_every=2"]
    cmd += ["train.log_every=2"]
    # Prepend: gpu_check.sh may have put carried packages on PYTHONPATH.
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state.step == 4 and state.config["train"]["device"] == device.type
    assert all(torch.isfinite(t).all() for t in state.model.values())
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == [1, 2, 4]  # the first update has a row of its own
    if device.type == "cuda":  # the allocator's figures: memory was taken, none given back
        assert all(r["gpu_peak_gib"] > 0 and r["gpu_mallocs"] >= 1 for r in rows)
        assert rows[-1]["gpu_mallocs"] >= rows[0]["gpu_mallocs"]
        assert rows[-1]["gpu_alloc_retries"] == 0
    else:
        assert not any("gpu_peak_gib" in r for r in rows)


class OneRankDDP(DistributedContext):
    """A real process group of one rank that still takes the multi-rank code paths.

    `DistributedContext.enabled` is False for one rank, so with one GPU nothing else reaches
    the DDP wrapper and the all-reduce, broadcast and gather calls of the Trainer.
    """

    @property
    def enabled(self) -> bool:
        return True


def test_trainer_ddp_collectives_over_nccl(device, tmp_path):
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)  # the device object collectives stage their bytes on
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        trainer = tiny_trainer(tmp_path / "run", device, dist_context=OneRankDDP())
        assert trainer.updater.wrapped is not trainer.model  # wrapped in DistributedDataParallel
        start = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        result = trainer.train()  # all-reduce per update, broadcast and gather at validation
    finally:
        dist.destroy_process_group()
    assert result.step == 3 and result.stopped_by == "max_steps"
    state = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert state.step == 3 and len(state.training.rng) == 1
    assert any(not torch.equal(start[k], trainer.model.state_dict()[k]) for k in start)
