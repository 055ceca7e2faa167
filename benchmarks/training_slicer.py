"""Slicer's contenders of `training.py`: the GPT's training step imported once (`slicer.training_step` with
`slicer.AdamW`), partitioned by each strategy and run in a session on 2 MPI ranks, as
examples/training/train_gpt.py does.

    python benchmarks/training_slicer.py data,fsdp,megatron SIZES_JSON OUT

Strategies: data (`strategies.data_parallel` over x=2), fsdp (`strategies.zero(stage=3)` over x=2), megatron
(`strategies.megatron` over y=2 with the model's `megatron_split`). A step's time is the wall time of
`float(session.step(idx, targets))` as the user sees it: sending each rank its block of the batch, the ranks'
forward, backward and update, the loss back. Peak memory: VmHWM of each rank process (read from /proc just
before the session closes); the driver's (which imported and partitioned the step) is reported apart.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_common import (
    ADAMW,
    Sizes,
    batches,
    build_model,
    loss_function,
    megatron_split,
    peak_rss_mib,
    record,
    status_mib,
    write,
)

import slicer
from slicer import strategies

RANK_PROGRAM = "slicer.runtime.jobs.rank_server"


def tactics_for(step, strategy: str, sizes: Sizes = Sizes()):
    """The mesh and tactics of `strategy` on 2 devices for the model `sizes` name (train_gpt.py's
    `tactics_for`)."""
    if strategy == "data":
        return slicer.Mesh(x=2), strategies.data_parallel(step, "x")
    if strategy == "fsdp":
        return slicer.Mesh(x=2), strategies.zero(step, "x", stage=3)
    if strategy == "megatron":
        return slicer.Mesh(y=2), strategies.megatron(step, "y", **megatron_split(sizes))
    raise SystemExit(f"unknown Slicer strategy {strategy!r}: data, fsdp or megatron")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return tree


def rank_memory(root: int) -> list[tuple[float, float]]:
    """(VmHWM, RssShmem) in MiB of every rank process under the job started as `root` (mpiexec, whose own
    command line names the rank program too), in pid order."""
    tree, peaks = _children(), []
    pending = list(tree.get(root, ()))
    while pending:
        pid = pending.pop()
        pending.extend(tree.get(pid, ()))
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if RANK_PROGRAM.encode() in command:
            peaks.append((pid, (peak_rss_mib(pid), status_mib(pid, "RssShmem"))))
    return [memory for _, memory in sorted(peaks)]


def run_strategy(step, strategy: str, sizes: Sizes, data) -> dict:
    start = time.perf_counter()
    mesh, tactics = tactics_for(step, strategy, sizes)
    program = slicer.compile(step, mesh=mesh, tactics=tactics)
    partitioned = time.perf_counter() - start
    times, losses = [], []
    with program.session(ranks=2) as session:
        started = time.perf_counter() - start - partitioned
        for idx, targets in data:
            begin = time.perf_counter()
            loss = float(session.step(idx, targets))
            times.append(time.perf_counter() - begin)
            losses.append(loss)
        memory = rank_memory(session.job.process.pid)
    if len(memory) != 2:
        raise SystemExit(f"found {len(memory)} rank processes of the {strategy} session, expected 2")
    return record(f"slicer_{strategy}", sizes, times, losses, [peak for peak, _ in memory], processes=2,
                  shared_memory_mib=[shared for _, shared in memory], mesh=str(mesh), partition_s=partitioned,
                  session_start_s=started)


def main(argv: list[str]) -> None:
    names, sizes, out = argv[0].split(","), Sizes.from_json(argv[1]), argv[2]
    data = batches(sizes)  # torch tensors, as a user passes them
    start = time.perf_counter()
    optimizer = slicer.AdamW(lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"],
                             weight_decay=ADAMW["weight_decay"])
    precision = slicer.MixedPrecision(param_dtype="bf16", reduce_dtype="f32") if sizes.precision == "bf16" else None
    step = slicer.training_step(build_model(sizes), loss_function(sizes), *data[0], optimizer=optimizer,
                                precision=precision)
    imported = time.perf_counter() - start
    results = {}
    for name in names:
        results[f"slicer_{name}"] = {**run_strategy(step, name, sizes, data), "import_s": imported}
    write(out, {"results": results, "driver_peak_rss_mib": peak_rss_mib()})


if __name__ == "__main__":
    main(sys.argv[1:])
