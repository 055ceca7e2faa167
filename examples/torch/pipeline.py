"""Pipeline parallelism: a GPT trained in stages (`slicer.strategies.pipeline`) next to torch's accumulation loop.

Shared by the tests (test/unit/pipelining/, test/mpi/test_pipeline_mpi.py) and runnable:

    python examples/torch/pipeline.py                          # 2 stages in this process, 1F1B, 4 micro-batches
    python examples/torch/pipeline.py --ranks 2 --schedule gpipe

It prints the pipelined program's explanation (each stage's order of work, the bubble, the activations held)
and the largest relative error of the losses and of every parameter after 3 steps against torch (the whole
batch, its gradients accumulated over the same micro-batches, `torch.optim` with foreach=False).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step
from accumulation import torch_accumulation_steps

import slicer
from slicer import strategies as st


def pipelined(model, loss_fn, batch, optimizer, *, split, microbatches: int, schedule: str = "1f1b",
              virtual_stages: int = 1, mesh=None, strategy=None):
    """(training step, pipelined program) of `model` cut at `split` over the axis p of `mesh` (default p=2);
    `strategy(step)`, if given, the tactics of the mesh's other axes (e.g. `st.data_parallel(step, "x")`)."""
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    mesh = mesh or slicer.Mesh(p=2)
    pipe = st.pipeline(step, "p", split=split, microbatches=microbatches, schedule=schedule,
                       virtual_stages=virtual_stages)
    return step, slicer.compile(step, mesh=mesh, tactics=pipe + (strategy(step) if strategy else []))


def compare(model, loss_fn, batch, optimizer, prog, microbatches: int, steps: int = 3, ranks=None):
    """(largest relative error of the losses, of the final parameters, Slicer's final state) of `steps` steps
    of the pipelined `prog` against torch's accumulation loop over the same micro-batches."""
    want_losses, want = torch_accumulation_steps(model, loss_fn, batch, optimizer, steps, microbatches)
    got_losses, got = prog.train([batch] * steps, ranks=ranks)
    loss_error = max(train_step.relative_error(g, w) for g, w in zip(got_losses, want_losses))
    state_error = max(train_step.relative_error(got[n], want[n]) for n, p in model.named_parameters()
                      if p.requires_grad)
    return loss_error, state_error, got


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=None, help="run on this many MPI ranks (default: in process)")
    parser.add_argument("--schedule", default="1f1b", choices=("gpipe", "1f1b"))
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--optimizer", default="adamw", choices=("adamw", "sgd"))
    args = parser.parse_args(argv)
    model, loss_fn, batch = train_step.gpt(n_layer=args.layers, batch=8)
    optimizer = slicer.AdamW(1e-2) if args.optimizer == "adamw" else slicer.SGD(0.1, momentum=0.9)
    split = [f"blocks.{args.layers // 2}"]
    _, prog = pipelined(model, loss_fn, batch, optimizer, split=split, microbatches=args.microbatches,
                        schedule=args.schedule)
    print(prog.explain())
    loss_error, state_error, _ = compare(model, loss_fn, batch, optimizer, prog, args.microbatches, ranks=args.ranks)
    print(f"3 steps against torch: losses within {loss_error:.2e}, parameters within {state_error:.2e} (relative)")
    if args.ranks:
        print(prog.timeline_text())  # the last step on the ranks: F forward, B backward, U update, . idle


if __name__ == "__main__":
    main()
