"""PyTorch contenders of `training.py`, as a user runs them on a 2-core machine: each a worker process.

    python benchmarks/training_torch.py threads SIZES_JSON OUT   # one process, torch.set_num_threads(2)
    python benchmarks/training_torch.py ddp SIZES_JSON OUT       # DistributedDataParallel, gloo, 2 processes (forked)
    python benchmarks/training_torch.py fsdp2 SIZES_JSON OUT     # fully_shard (FSDP2) per block + root, gloo, 2

A step is `zero_grad`, the loss of examples/training/model.py, `backward`, `torch.optim.AdamW.step` (the
default implementation, as a user gets it) and `loss.item()`; its time is the wall time of that on each
process, the step's time the slowest process's. DDP and FSDP2 give each process half of the global batch
(rows rank*B/2 ..): the global loss is the mean of the two halves' losses (equal sizes), averaged after the
timed loop so no extra collective is timed. Peak memory: VmHWM of each process.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch
from training_common import (
    ADAMW,
    Sizes,
    autocast,
    batches,
    blocks,
    build_model,
    loss_function,
    peak_rss_mib,
    record,
    write,
)


def _train(model, optimizer, data, loss_fn, rows: slice | None = None, precision=None):
    """Run every step (the forward and loss under `precision`, a context such as autocast); the wall time and
    the local loss of each."""
    times, losses = [], []
    for idx, targets in data:
        if rows is not None:
            idx, targets = idx[rows], targets[rows]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with precision if precision is not None else contextlib.nullcontext():
            loss = loss_fn(model, idx, targets)
        loss.backward()
        optimizer.step()
        value = loss.item()
        times.append(time.perf_counter() - start)
        losses.append(value)
    return times, losses


def threads(sizes: Sizes, out: str) -> None:
    torch.set_num_threads(2)
    model = build_model(sizes)
    optimizer = torch.optim.AdamW(model.parameters(), **ADAMW)
    times, losses = _train(model, optimizer, batches(sizes), loss_function(sizes), precision=autocast(sizes))
    write(out, record("torch_threads", sizes, times, losses, [peak_rss_mib()], processes=1, threads=2))


def _distributed_rank(rank: int, kind: str, sizes: Sizes, port: int, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        model = build_model(sizes)
        if kind == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            wrapped = DistributedDataParallel(model)
        else:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # torch >= 2.6: FSDP2

            policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                      if sizes.precision == "bf16" else MixedPrecisionPolicy())
            for block in blocks(model):
                fully_shard(block, mp_policy=policy)
            wrapped = fully_shard(model, mp_policy=policy)
        optimizer = torch.optim.AdamW(wrapped.parameters(), **ADAMW)
        half = sizes.batch // 2
        rows = slice(rank * half, (rank + 1) * half)
        loss_fn = loss_function(sizes)
        # DDP under bf16 runs autocast (its gradients are f32: DDP reduces them in f32); FSDP2 runs its policy
        precision = autocast(sizes) if kind == "ddp" else None
        times, losses = _train(wrapped, optimizer, batches(sizes), loss_fn, rows, precision)
        gathered = [None, None]
        dist.all_gather_object(gathered, (times, losses, peak_rss_mib()))
        if rank == 0:
            step_times = [max(t) for t in zip(*(g[0] for g in gathered))]
            mean_losses = [sum(pair) / 2 for pair in zip(*(g[1] for g in gathered))]
            write(out, record(f"torch_{kind}", sizes, step_times, mean_losses, [g[2] for g in gathered],
                              processes=2, threads=1))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def distributed(kind: str, sizes: Sizes, out: str) -> None:
    if sizes.batch % 2:
        raise SystemExit(f"{kind} splits the batch over 2 processes: give an even --batch (got {sizes.batch})")
    import torch.multiprocessing as mp

    # fork: the ranks start from this process's imports (torch imported once, not three times); no torch
    # thread pool has started here yet, so forking is safe
    mp.start_processes(_distributed_rank, args=(kind, sizes, _free_port(), out), nprocs=2, start_method="fork")


def main(argv: list[str]) -> None:
    kind, sizes, out = argv[0], Sizes.from_json(argv[1]), argv[2]
    if kind == "threads":
        threads(sizes, out)
    elif kind in ("ddp", "fsdp2"):
        distributed(kind, sizes, out)
    else:
        raise SystemExit(f"unknown torch contender {kind!r}: threads, ddp or fsdp2")


if __name__ == "__main__":
    main(sys.argv[1:])
