"""Train the zoo (zoo_models.py) for a few AdamW steps under each strategy and compare with torch eager.

    python examples/zoo/train.py                       # every model, data / ZeRO-3 / Megatron, simulator
    python examples/zoo/train.py --ranks 2             # the same on 2 MPI ranks
    python examples/zoo/train.py nanogpt bert --strategies data megatron

Each row says whether the step imported, compiled without a `slicer.DegradedStrategy` warning and trained equal
to torch (torch.optim.AdamW, foreach=False, on a copy of the model): the largest relative error of the losses
and of the final parameters (and buffers, for BatchNorm's running statistics), or the first line of the error.
Equal means within `TOLERANCE` of torch float32, or as close to torch float64 as torch float32 is.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo_models import ZOO  # noqa: E402

import slicer  # noqa: E402
from slicer import strategies as st  # noqa: E402

OPTIMIZER = slicer.AdamW(1e-3, betas=(0.9, 0.99), weight_decay=0.1)
STRATEGIES = ("data", "zero3", "megatron")


def tactics(kind: str, step, case, devices: int):
    """(mesh, tactics) of strategy `kind` over `devices` devices, or None where the model has no heads."""
    if kind == "data":
        return slicer.Mesh(x=devices), st.data_parallel(step, "x")
    if kind == "zero3":
        mesh = slicer.Mesh(x=devices)
        return mesh, st.zero(step, "x", stage=3, mesh=mesh)
    if case.megatron is None:
        return None
    return slicer.Mesh(y=devices), st.megatron(step, "y", **case.megatron)


def torch_steps(case, steps: int, dtype=torch.float32):
    """(losses, final parameters and buffers by name) of `steps` torch AdamW steps on a copy of the model in
    `dtype` (its floating batch tensors too)."""
    model = copy.deepcopy(case.model).to(dtype)
    batch = [b.to(dtype) if b.is_floating_point() else b for b in case.batch]
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], OPTIMIZER.lr,
                            betas=OPTIMIZER.betas, eps=OPTIMIZER.eps, weight_decay=OPTIMIZER.weight_decay, foreach=False)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = case.loss_fn(model, *batch)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    state = {n: t.detach().double().numpy() for n, t in [*model.named_parameters(), *model.named_buffers()]
             if t.is_floating_point()}
    return losses, state


def relative_error(got, want) -> float:
    want = np.asarray(want, np.float64)
    diff = float(np.linalg.norm(np.asarray(got, np.float64) - want))
    norm = float(np.linalg.norm(want))
    return diff / norm if norm else diff


TOLERANCE = 1e-5
"""Equal: within this of torch float32 (relative), or no farther from torch float64 than twice torch float32 is:
where AdamW divides a gradient's rounding noise by its own magnitude (weights of a convolution before a train-mode
BatchNorm, whose gradients nearly cancel), torch float32 itself is 1e-5 from float64, and the two float32 runs
differ by as much as each differs from the exact one."""


def state_error(got: dict, want32: dict, want64: dict) -> float:
    """The largest error of `got` over the tensors, each measured against torch float32, or 0 where it is within
    the float64 bound of `TOLERANCE`'s docstring."""
    worst = 0.0
    for name, want in want32.items():
        if name in got:
            error = relative_error(got[name], want)
            if error > TOLERANCE and relative_error(got[name], want64[name]) <= 2 * relative_error(want, want64[name]):
                error = 0.0
            worst = max(worst, error)
    return worst


def run_case(case, kind: str, step, ranks, steps: int) -> str:
    """One row's outcome: 'equal (...)', 'DIFFERENT (...)', 'degraded: ...', 'n/a' or 'error: ...'."""
    devices = ranks or 2
    chosen = tactics(kind, step, case, devices)
    if chosen is None:
        return "n/a (no heads)"
    mesh, tactic_list = chosen
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", slicer.DegradedStrategy)
        prog = slicer.compile(step, mesh=mesh, tactics=tactic_list)
    degraded = [w for w in caught if issubclass(w.category, slicer.DegradedStrategy)]
    want_losses, want_state = torch_steps(case, steps)
    _, exact_state = torch_steps(case, steps, torch.float64)
    with prog.session(ranks=ranks, timeout=300) as session:
        losses = [float(session.step(*case.batch)) for _ in range(steps)]
        state = session.state_dict()
    loss_error = max(relative_error(g, w) for g, w in zip(losses, want_losses))
    worst = state_error(state, want_state, exact_state)
    verdict = "equal" if loss_error <= TOLERANCE and worst <= TOLERANCE else "DIFFERENT"
    line = f"{verdict} (loss {loss_error:.1e}, state {worst:.1e})"
    if degraded:
        line += f"; DEGRADED x{len(degraded)}: {str(degraded[0].message).splitlines()[0][:120]}"
    return line


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(ZOO), help=f"of {', '.join(ZOO)}")
    parser.add_argument("--strategies", nargs="*", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--ranks", type=int, default=None, help="MPI ranks (default: the simulator, 2 devices)")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    failures = 0
    for name in args.models:
        case = ZOO[name]()
        start = time.perf_counter()
        try:
            step = slicer.training_step(case.model, case.loss_fn, *case.batch, optimizer=OPTIMIZER)
        except slicer.SlicerError as exc:
            print(f"{name:9s} import: error: {str(exc).splitlines()[0][:200]}")
            failures += len(args.strategies)
            continue
        print(f"{name:9s} imported in {time.perf_counter() - start:.1f} s")
        for kind in args.strategies:
            try:
                outcome = run_case(case, kind, step, args.ranks, args.steps)
            except slicer.SlicerError as exc:
                outcome = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            failures += not outcome.startswith(("equal", "n/a")) or "DEGRADED" in outcome
            print(f"  {kind:9s} {outcome}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
