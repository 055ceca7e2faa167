"""Gradient accumulation: `slicer.training_step(..., microbatches=k)` against torch's accumulation loop, and what
it saves in memory.

Shared by the tests (test/unit/frontends/test_accumulation.py, test/mpi/test_accumulation_mpi.py) and runnable:

    python examples/torch/accumulation.py               # GPT (batch 16, seq 64, D=128), data parallel over x=2
    python examples/torch/accumulation.py --ranks 2     # the same, also run on 2 MPI ranks (measured peaks, time)

For k = 1, 2, 4 it prints the import and compile times, the size of the program, the compiled program's peak
bytes per device (`Program.memory()`) and what the step holds beyond its arguments (activations and gradients),
and with --ranks the peak each rank's executor measured and the step's time.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_modes
import train_step

import slicer
from slicer import strategies as st


def torch_accumulation_steps(model, loss_fn, batch, optimizer, steps: int, microbatches: int,
                             max_norm: float | None = None):
    """(losses, final parameters and buffers by name): `steps` steps of torch's accumulation loop on a copy of
    `model` (in its mode): per micro-batch (rows i, i + k, ... of each batch tensor) `loss / k` and backward,
    then `clip_grad_norm_(max_norm)` if given, then the step of torch.optim (foreach=False). The loss of a step
    is the sum of the `loss / k`. Replayed dropouts (`train_modes.replayed`) are told their micro-batch."""
    model = copy.deepcopy(model)
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = train_step.torch_optimizer(optimizer, trained)
    replays = [m for m in model.modules() if isinstance(m, train_modes.ReplayedDropout)]
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        total = 0.0
        for micro in range(microbatches):
            for replay in replays:
                replay.micro = (micro, microbatches)
            loss = loss_fn(model, *(t[micro::microbatches] for t in batch)) / microbatches
            loss.backward()
            total += loss.item()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(trained, max_norm, foreach=False)
        opt.step()
        losses.append(total)
        for replay in replays:
            replay.step += 1
    state = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    state.update({n: b.numpy().copy() for n, b in model.named_buffers()})
    return losses, state


def compare(model, loss_fn, batch, optimizer, prog, microbatches: int, steps: int = 3, ranks=None,
            reference=None, max_norm=None):
    """(largest relative error of the losses, of the final parameters and buffers, the state Slicer ended with)
    of `steps` steps of `prog` (a compiled step with `microbatches`) against torch's accumulation loop on
    `reference` (default: `model`)."""
    want_losses, want = torch_accumulation_steps(reference if reference is not None else model, loss_fn, batch,
                                                 optimizer, steps, microbatches, max_norm)
    got_losses, got = train_step.slicer_steps(prog, batch, steps, ranks)
    loss_error = max(train_step.relative_error(g, w) for g, w in zip(got_losses, want_losses))
    state_error = max(train_step.relative_error(got[n], w) for n, w in want.items())
    return loss_error, state_error, got


def measure(microbatches: int, ranks=None, **gpt) -> dict:
    """Figures of the data-parallel (x=2) step of examples/torch/gpt.py's GPT with `microbatches`: seconds to
    import and compile, MLIR characters, kernels, the compiled peak and arguments (bytes per device), and with
    `ranks` the executor's measured peaks and the step's median seconds."""
    model, loss_fn, batch = train_step.gpt(**gpt)
    start = time.perf_counter()
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.AdamW(1e-3), microbatches=microbatches)
    imported = time.perf_counter()
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x"))
    compiled = time.perf_counter()
    report = prog.memory()
    figures = {"import": imported - start, "compile": compiled - imported, "mlir": len(step.text),
               "kernels": sum(1 for n in prog.graph.nodes if hasattr(n, "inputs")), "peak": report.peak,
               "arguments": report.argument_bytes}
    if ranks:
        with prog.session(ranks=ranks, timeout=600) as session:
            session.step(*batch)  # warm-up
            start = time.perf_counter()
            for _ in range(3):
                session.step(*batch)
            figures["step"] = (time.perf_counter() - start) / 3
        _, timings = prog.run(*batch, ranks=ranks, return_timings=True)
        figures["measured"] = tuple(timings.peak_bytes)
    return figures


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=None, help="MPI ranks (default: compile only)")
    args = parser.parse_args(argv)
    mib = 1 << 20
    for k in (1, 2, 4):
        f = measure(k, args.ranks, batch=16, seq=64, d_model=128, n_head=4, vocab=512)
        line = (f"microbatches={k}: import {f['import']:.1f} s, compile {f['compile']:.1f} s, {f['mlir']} MLIR "
                f"characters, {f['kernels']} kernels; peak {f['peak'] / mib:.2f} MiB per device, of which "
                f"{(f['peak'] - f['arguments']) / mib:.2f} MiB beyond the arguments")
        if "step" in f:
            line += (f"; measured peaks {', '.join(f'{p / mib:.2f}' for p in f['measured'])} MiB, "
                     f"step {f['step'] * 1e3:.1f} ms")
        print(line, flush=True)


if __name__ == "__main__":
    main()
