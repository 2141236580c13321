"""Data-parallel context: which rank this process is, and the few collectives training needs.

`torchrun --nproc_per_node N -m transformer_mt train ...` sets RANK, WORLD_SIZE and LOCAL_RANK
(and, across nodes, the rendezvous address); `init_distributed` reads them and joins the
process group (NCCL on CUDA, gloo on CPU). A plain single process never touches
torch.distributed: every collective below is then the identity.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistributedContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 writes files, logs and the progress bar."""
        return self.rank == 0

    def sum_over_ranks(self, values: list[float], device: torch.device) -> list[float]:
        """Each value summed over ranks, in one float64 all-reduce staged on `device`; the
        values themselves on one process."""
        if not self.enabled:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.tolist()

    def sum_in_place(self, tensor: torch.Tensor) -> None:
        """`tensor` summed over ranks, where it is (on one process: left as it is); unlike
        `sum_over_ranks`, nothing is read back to the host."""
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (picklable values: decisions, scores)."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj` as a list on rank 0 (None elsewhere)."""
        if not self.enabled:
            return [obj]
        out: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def init_distributed(device_kind: str) -> DistributedContext:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1), else stay single."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistributedContext()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    return DistributedContext(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )


def shutdown_distributed(ctx: DistributedContext) -> None:
    """Leave the process group; after training, every rank comes here from a `barrier()`.
    A rank tearing gloo down alone, while rank 0 still writes its checkpoint, can abort the
    process (`terminate called without an active exception`) and fail a finished job."""
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()
