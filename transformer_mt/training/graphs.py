"""Training updates replayed from CUDA graphs, one graph per batch shape (train.cuda_graphs).

Why: a small model's update on a GPU is bound by kernel launches, not arithmetic. On an H200
an eager CUDA op cost 6.3 µs to launch against 0.94 µs replayed from a graph, and the
quickstart model's update at 8,192 tokens took about 45 ms for arithmetic the card does in
under one (configs/multi30k_de_en_gpu.yaml). A graph replays a recorded sequence of kernels on
fixed addresses, so it is recorded once per batch shape, which train.pad_to_multiple keeps to
a few dozen.

How: the first update on a shape runs eagerly, and it is that step's real update; the shape's
graph is captured right after it (capture records the kernels, it does not run them). Every
later update on that shape copies its batch into the shape's input buffers, writes the step's
learning rate, number and token scale into scalars on the device, and replays. The update is
`Updater`'s own code (`forward_backward`, then `step`), given those scalars as tensors, so
that capture fixes nothing but the shape. `capture=False` runs the same tensor-fed update
eagerly on every step: on a CPU, the tests' check that the update graphs record equals the
plain one.

Memory: the graphs share one memory pool. That is safe because nothing one graph leaves behind
is read by another: a replay's figures (loss, NLL, gradient norm, applied) are copied out right
after it, gradients are made and used within one replay, and the weights, optimizer state and
counters were all allocated before the first capture and are only updated in place.

Not covered: several ranks, update_freq > 1, fp16 (GradScaler's scale lives on the host) and
torch.compile; `TrainConfig.validate` and `Updater` refuse them with train.cuda_graphs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from transformer_mt.data.batching import Batch

log = logging.getLogger(__name__)


class RecordableUpdate(Protocol):
    """What of `update.Updater` a graph records: its device, its autocast setting, and the
    update's two halves, which take their scalars as tensors."""

    device: torch.device
    autocast_cache: bool

    def forward_backward(
        self, batches: Sequence[Batch], scale: float | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def step(
        self, loss: torch.Tensor, step: int | torch.Tensor, lr: float | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


# (loss, nll, grad_norm, applied) of one update, on the device: as `LaunchedUpdate` holds them.
Figures = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass
class _Shape:
    """One batch shape's input buffers, its graph (None until captured, or without capture)
    and the figures its replays write."""

    inputs: Batch
    graph: torch.cuda.CUDAGraph | None = None
    figures: Figures | None = None


class CapturedUpdates:
    """The updates of one `Updater`, replayed from a graph per batch shape (module docstring).

    Args:
        updater: whose model, optimizer, counters and update code are captured.
        capture: record and replay CUDA graphs; False runs the same update eagerly (CPU tests).
    """

    def __init__(self, updater: RecordableUpdate, capture: bool = True) -> None:
        self.updater = updater
        self.capture = capture
        device = updater.device
        # CUDA's fused AdamW reads a float32 learning rate; a float64 one on the CPU equals the
        # Python float that eager training passes, bit for bit.
        lr_dtype = torch.float32 if device.type == "cuda" else torch.float64
        self.lr = torch.zeros((), dtype=lr_dtype, device=device)
        self.step_number = torch.zeros((), dtype=torch.float64, device=device)
        self.tokens = torch.zeros((), dtype=torch.float64, device=device)
        self.shapes: dict[tuple[int, ...], _Shape] = {}
        self.pool = None  # the graphs' shared memory pool, from the first capture
        updater.autocast_cache = False  # a cached cast would be captured as a stale tensor

    @property
    def captured(self) -> int:
        """How many batch shapes have a graph."""
        return sum(shape.graph is not None for shape in self.shapes.values())

    def launch(self, batch: Batch, step: int, tokens: float, lr: float) -> Figures:
        """Queue update `step` on `batch` (this update's only batch, `tokens` its target
        tokens, `lr` its learning rate) without waiting for the device."""
        self.lr.fill_(lr)
        self.step_number.fill_(step)
        self.tokens.fill_(tokens)
        key = (*batch.src_ids.shape, *batch.tgt_in_ids.shape)
        shape = self.shapes.get(key)
        if shape is None:
            shape = self.shapes[key] = _Shape(batch.to(self.updater.device, non_blocking=True))
            if not self.capture:
                return self._update(shape.inputs)
            # This step's update, eagerly and on a side stream, as CUDA graph capture wants
            # its warm-up: the optimizer state and library handles exist before recording.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                figures = self._update(shape.inputs)
            torch.cuda.current_stream().wait_stream(side)
            self._capture(shape)
            return figures
        batch.copy_into(shape.inputs)
        if shape.graph is None:
            return self._update(shape.inputs)
        shape.graph.replay()
        assert shape.figures is not None
        return tuple(t.clone() for t in shape.figures)  # type: ignore[return-value]

    def _update(self, inputs: Batch) -> Figures:
        """`Updater`'s update, fed by the scalars on the device."""
        updater = self.updater
        scale = (1.0 / self.tokens).float()  # world_size / tokens, with one process
        loss, nll = updater.forward_backward([inputs], scale)
        grad_norm, applied = updater.step(loss / self.tokens, self.step_number, self.lr)
        return loss, nll, grad_norm, applied

    def _capture(self, shape: _Shape) -> None:
        """Record `shape`'s update as a graph in the shared pool (nothing runs: the update
        just made eagerly was this step's)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            shape.figures = self._update(shape.inputs)
        self.pool = self.pool if self.pool is not None else graph.pool()
        shape.graph = graph
        src, tgt = shape.inputs.src_ids.shape, shape.inputs.tgt_in_ids.shape
        log.info(
            "cuda_graphs: recorded the update of %d x %d -> %d tokens (%d batch shapes so far)",
            *(src[0], src[1], tgt[1], self.captured),
        )
