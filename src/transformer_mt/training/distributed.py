"""Data parallelism across processes launched by torchrun: gloo on CPU, NCCL on GPU.

Every rank holds the whole model and reads the whole (memory-mapped) data; each update's batches
are dealt out to the ranks, DistributedDataParallel sums the gradients, and only rank 0 writes
checkpoints, metrics and logs. A single process is a world of size 1 and needs none of this.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """auto: the rank's GPU if CUDA is available, else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"train.device={name!r}, but CUDA is not available here")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    return device


def init_world(device_name: str) -> tuple[World, torch.device]:
    """The world torchrun describes in the environment (WORLD_SIZE, RANK, LOCAL_RANK), with the
    process group initialised; a world of one without torchrun."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return World(), resolve_device(device_name)
    world = World(int(os.environ["RANK"]), size, int(os.environ["LOCAL_RANK"]))
    device = resolve_device(device_name, world.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return world, device


def all_sum(values: list[float], world: World, device: torch.device) -> list[float]:
    """Element-wise sum over the ranks."""
    if world.size == 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def gather_rng(world: World, device: torch.device) -> dict[str, torch.Tensor]:
    """Every rank's torch generator state as "rng.torch.rank<r>" (rank 0's is saved anyway)."""
    if world.size == 1:
        return {}
    state = torch.get_rng_state().to(device)
    states = [torch.empty_like(state) for _ in range(world.size)]
    dist.all_gather(states, state)
    return {f"rng.torch.rank{r}": s.cpu() for r, s in enumerate(states) if r > 0}


def shutdown(world: World, *, clean: bool) -> None:
    """Leave the process group; after a clean finish, only once every rank is done (rank 0 may
    still be writing its last checkpoint, and a rank leaving early aborts gloo's threads)."""
    if world.size > 1 and dist.is_initialized():
        if clean:
            dist.barrier()
        gc.collect()  # DistributedDataParallel's gloo work objects, before the group goes
        dist.destroy_process_group()
