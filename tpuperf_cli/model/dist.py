"""Data-parallel training across processes and hosts (torch.distributed).

    torchrun --nproc_per_node 2 -m tpuperf_cli train --data 'shards/*.zst' -o m.pt

torchrun starts one process per rank and sets RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT; `Dist.from_env` joins them (gloo on CPU, NCCL
when training on CUDA). Every rank scans all shards (so the feature scaling
and each program's size are the same everywhere) but decodes, keeps and
trains on only its share of the examples (`owner`), so memory and compute
per process shrink with the number of processes. Each step, every rank
computes the gradient of its share of the global batch, and one all-reduce
sums them weighted by example counts: the optimizer then takes the same
step everywhere, the step one process would take on the whole batch.
Validation predictions are gathered, so every rank computes the same
figures and takes the same early-stopping decision; only rank 0 writes
files and progress.

A single process (no WORLD_SIZE, or 1) gets a Dist whose operations are
no-ops, so the loop has one code path.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable

from tpuperf_cli.errors import TpuperfError


def owner(index: int, world: int, group: tuple[str, str] | None = None) -> int:
    """The rank that trains on an example: by its index (fusion: neighbouring
    records go to different ranks), or by its (program, kernel) group (tile:
    a kernel's configurations must stay together for the rank loss)."""
    if group is not None:
        return zlib.crc32(f"{group[0]}\0{group[1]}".encode()) % world
    return index % world


class Dist:
    """The process group of a data-parallel run (rank 0 of 1 when alone)."""

    def __init__(self, rank: int = 0, world: int = 1, local_rank: int = 0, backend: str | None = None):
        self.rank, self.world, self.local_rank, self.backend = rank, world, local_rank, backend

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, device: str = "cpu") -> Dist:
        """Join the group torchrun describes in the environment; a lone Dist
        when there is none."""
        try:
            world = int(os.environ.get("WORLD_SIZE", "1"))
            int(os.environ.get("RANK", "0"))       # checked; the group reports the rank
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        except ValueError:
            raise TpuperfError("WORLD_SIZE, RANK and LOCAL_RANK must be integers (as torchrun "
                               "sets them)") from None
        if world <= 1:
            return cls()
        import torch
        import torch.distributed as dist

        backend = "nccl" if device.startswith("cuda") and torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        if not dist.is_initialized():
            dist.init_process_group(backend)
        return cls(dist.get_rank(), dist.get_world_size(), local_rank, backend)

    def device(self, device: str) -> str:
        """Each process of a host on its own GPU: plain "cuda" means cuda:LOCAL_RANK."""
        return f"cuda:{self.local_rank}" if device == "cuda" and self.world > 1 else device

    def local_batch(self, batch_size: int) -> int:
        """This rank's share of a global batch of `batch_size` graphs."""
        if batch_size < self.world:
            raise TpuperfError(f"--batch-size {batch_size} is smaller than the {self.world} "
                               f"processes: every process needs at least one graph per step",
                               exit_code=2)
        return batch_size // self.world + (self.rank < batch_size % self.world)

    def reduce_gradients(self, parameters: Iterable, n: int, loss_sum: float) -> tuple[int, float]:
        """Replace each parameter's gradient (of the mean loss over this
        rank's n examples) by that of the mean over all ranks' examples;
        (examples, loss sum) of the whole step. A rank without a batch
        passes n=0 and no gradients. One all-reduce per step."""
        if self.world == 1:
            return n, loss_sum
        import torch
        import torch.distributed as dist

        params = list(parameters)
        device = params[0].device
        parts = []
        for p in params:
            g = p.grad
            parts.append(g.reshape(-1) * n if g is not None and n else torch.zeros(p.numel(), device=device))
        # per parameter: whether any rank has a gradient for it (an unused one keeps None,
        # as it would in one process, so the optimizer leaves it alone)
        has = [1.0 if p.grad is not None and n else 0.0 for p in params]
        flat = torch.cat(parts + [torch.tensor(has + [float(n), float(loss_sum)], device=device)])
        dist.all_reduce(flat)
        total, loss_total = int(round(float(flat[-2]))), float(flat[-1])
        if total == 0:
            return 0, 0.0
        offset = 0
        flags = flat[-2 - len(params):-2]
        for i, p in enumerate(params):
            k = p.numel()
            if float(flags[i]) > 0:
                g = (flat[offset:offset + k] / total).reshape(p.shape)
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.copy_(g)
            else:
                p.grad = None
            offset += k
        return total, loss_total

    def gather(self, value) -> list:
        """[value of rank 0, value of rank 1, ...] on every rank."""
        if self.world == 1:
            return [value]
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, value)
        return out

    def max(self, value: float) -> float:
        """The largest of the ranks' values (e.g. elapsed time: all stop together)."""
        return value if self.world == 1 else max(self.gather(value))

    def close(self, finished: bool = True, wait_s: float = 30.0) -> None:
        """Leave the group. After a finished run, first wait for every rank:
        a rank tearing its gloo connections down while rank 0 still writes
        its files could leave a process hanging at exit (seen 1 in 8 runs
        here without the barrier). Then rank 0, which serves the group's
        store, stays until every other rank has left the group (at most
        wait_s): a rank left tearing down against a closed store hung (seen
        once in a loaded test run, after the barrier)."""
        if self.world > 1:
            import time

            import torch.distributed as dist
            from torch.distributed.distributed_c10d import _get_default_store

            if dist.is_initialized():
                store = None
                if finished:
                    dist.barrier()
                    store = _get_default_store()    # held: it outlives the group
                dist.destroy_process_group()
                if store is not None:
                    if self.rank != 0:
                        store.add("tpuperf_left", 1)
                    else:
                        end = time.monotonic() + wait_s
                        while store.add("tpuperf_left", 0) < self.world - 1 and time.monotonic() < end:
                            time.sleep(0.02)
