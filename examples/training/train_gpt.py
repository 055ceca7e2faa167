"""Train the small GPT of model.py for N steps with Slicer, next to PyTorch doing the same steps.

    python examples/training/train_gpt.py                                   # data parallel on 2 ranks
    python examples/training/train_gpt.py --strategy fsdp --ranks 4
    python examples/training/train_gpt.py --strategy megatron --ranks 2
    python examples/training/train_gpt.py --strategy 2d --ranks 4           # data over x=2, Megatron over y=2
    mpiexec -n 2 python examples/training/train_gpt.py --in-job             # the same, inside your own MPI job

The step (forward, backward, AdamW update) is imported once with `slicer.training_step`, partitioned by a
strategy from `slicer.strategies`, and run in a session that keeps the parameters and optimizer state on the
ranks: each step sends the batch only. PyTorch trains a copy of the same model with `torch.optim.AdamW` on the
same batches; both losses are printed, and the final parameters are compared.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import GPT, MEGATRON, batch, loss_fn

import slicer
from slicer import strategies

STRATEGIES = ("data", "fsdp", "megatron", "2d")


def tactics_for(step, strategy: str, ranks: int):
    """The mesh and tactics of `strategy` on `ranks` devices."""
    if strategy == "data":
        return slicer.Mesh(x=ranks), strategies.data_parallel(step, "x")
    if strategy == "fsdp":
        return slicer.Mesh(x=ranks), strategies.zero(step, "x", stage=3)
    if strategy == "megatron":
        return slicer.Mesh(y=ranks), strategies.megatron(step, "y", **MEGATRON)
    if ranks % 2:
        raise SystemExit("the 2-D strategy needs an even number of ranks (x=2 data, y=ranks/2 Megatron)")
    return (slicer.Mesh(x=2, y=ranks // 2),
            strategies.data_parallel(step, "x") + strategies.megatron(step, "y", **MEGATRON))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategy", choices=STRATEGIES, default="data")
    parser.add_argument("--ranks", type=int, default=2, help="MPI ranks (0: the in-process simulator)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--in-job", action="store_true", help="run inside this mpiexec job (every rank runs it)")
    args = parser.parse_args(argv)
    vocab, seq = 16, 16
    torch.manual_seed(0)
    model = GPT(vocab=vocab, seq=seq, d_model=32, n_head=4, n_layer=2)
    reference = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    example = batch(generator, args.batch, seq, vocab)
    optimizer = slicer.AdamW(lr=3e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)

    start = time.perf_counter()
    step = slicer.training_step(model, loss_fn, *example, optimizer=optimizer)
    ranks = args.ranks or 2
    mesh, tactics = tactics_for(step, args.strategy, ranks)
    prog = slicer.compile(step, mesh=mesh, tactics=tactics)
    compiled = time.perf_counter() - start
    torch_opt = torch.optim.AdamW(reference.parameters(), lr=3e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01,
                                  foreach=False)
    session_ranks = None if args.in_job or args.ranks == 0 else args.ranks
    with prog.session(ranks=session_ranks, oversubscribe=True) as session:
        rank0 = not args.in_job or getattr(session, "comm", None) is None or session.comm.Get_rank() == 0
        if rank0:
            print(f"{args.strategy} on {mesh} ({'simulator' if args.ranks == 0 else f'{ranks} ranks'}): "
                  f"imported and partitioned in {compiled:.1f} s")
            print(f"{'step':>5} {'slicer loss':>12} {'torch loss':>12}")
        begin = time.perf_counter()
        for i in range(args.steps):
            idx, targets = batch(generator, args.batch, seq, vocab)
            loss = float(session.step(idx, targets))
            torch_opt.zero_grad()
            ref_loss = loss_fn(reference, idx, targets)
            ref_loss.backward()
            torch_opt.step()
            if rank0 and (i % 10 == 0 or i == args.steps - 1):
                print(f"{i:>5} {loss:>12.5f} {ref_loss.item():>12.5f}")
        seconds = time.perf_counter() - begin
        state = session.state_dict()
    # One figure for all parameters: the norm of the difference over the norm of torch's parameters. Elementwise
    # ratios mislead here: a bias whose gradient is zero in exact arithmetic (attention's k bias: softmax does not
    # change when a constant is added to every score) gets rounding noise in both runs, which Adam then scales to
    # the learning rate; torch differs from itself that much when the batch is summed in another order.
    names = [name for name, _ in reference.named_parameters()]
    ours = np.concatenate([state[name].ravel() for name in names])
    theirs = np.concatenate([p.detach().numpy().ravel() for _, p in reference.named_parameters()])
    worst = float(np.linalg.norm(ours - theirs) / np.linalg.norm(theirs))
    if rank0:
        print(f"{args.steps} steps in {seconds:.1f} s (with torch's steps); final parameters: relative difference "
              f"to torch {worst:.2e} (norm of the difference / norm of torch's)")
    return 0 if worst < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
