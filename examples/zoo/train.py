"""Train the zoo (zoo_models.py) for a few AdamW steps under each strategy and compare with torch eager.

    python examples/zoo/train.py                       # every model, data / ZeRO-3 / Megatron, simulator
    python examples/zoo/train.py --ranks 2             # the same on 2 MPI ranks
    python examples/zoo/train.py nanogpt bert --strategies data megatron

Each row says whether the step imported, compiled without a `slicer.DegradedStrategy` warning and trained equal
to torch (torch.optim.AdamW, foreach=False, on a copy of the model): the largest relative error of the losses
and of the final parameters (and buffers, for BatchNorm's running statistics), or the first line of the error.
Equal means within `TOLERANCE` of torch float32, or the whole state within 1.5x of torch float32's distance
from a float64 run.
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
from zoo_models import ZOO

import slicer
from slicer import strategies as st

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
                            betas=OPTIMIZER.betas, eps=OPTIMIZER.eps, weight_decay=OPTIMIZER.weight_decay,
                            foreach=False)
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
"""Equal: every tensor within this of torch float32 (relative), or the whole state no farther from a torch float64
run than `FLOAT64_FACTOR` times torch float32 is (the issue's measure, `benchmarks/numerics.py`'s): where AdamW
divides a gradient's rounding noise by its own magnitude (weights and biases whose gradients nearly cancel under a
train-mode BatchNorm), torch float32 itself ends 1e-5 from float64, and two orders of summation differ as much."""

FLOAT64_FACTOR = 1.5


def distance(state: dict, exact: dict, initial: dict) -> float:
    """||state - exact|| / ||exact - initial|| over every tensor: the error of what training changed."""
    error = sum(float(np.sum((np.asarray(state[n], np.float64) - exact[n]) ** 2)) for n in exact)
    moved = sum(float(np.sum((exact[n] - initial[n]) ** 2)) for n in exact)
    return (error / moved) ** 0.5 if moved else error ** 0.5


def state_error(got: dict, want32: dict, want64: dict, initial: dict) -> tuple[float, float | None]:
    """(the largest relative error of `got`'s tensors against torch float32, and, when that is over `TOLERANCE`,
    the whole state's distance from float64 over torch float32's, else None; see `TOLERANCE`)."""
    names = [n for n in want32 if n in got]
    worst = max(relative_error(got[n], want32[n]) for n in names)
    if worst <= TOLERANCE:
        return worst, None
    exact = {n: want64[n] for n in names}
    return worst, distance(got, exact, initial) / distance(want32, exact, initial)


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
    _, initial = torch_steps(case, 0)
    with prog.session(ranks=ranks, timeout=300) as session:
        losses = [float(session.step(*case.batch)) for _ in range(steps)]
        state = session.state_dict()
    loss_error = max(relative_error(g, w) for g, w in zip(losses, want_losses))
    worst, ratio = state_error(state, want_state, exact_state, initial)
    state_ok = ratio is None or ratio <= FLOAT64_FACTOR
    verdict = "equal" if loss_error <= TOLERANCE and state_ok else "DIFFERENT"
    versus = f", {ratio:.2f}x torch float32's distance from float64" if ratio is not None else ""
    line = f"{verdict} (loss {loss_error:.1e}, state {worst:.1e}{versus})"
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
