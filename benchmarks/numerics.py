"""How far a training step's parameters are from a float64 run: Slicer's float32 next to torch's float32.

A GPT (examples/torch/gpt.py) trains a few AdamW steps in torch float64 (the reference), torch float32 and
Slicer (float32, one device, the compiled kernels); then, separately, one step's gradients (read from an SGD
step with a large learning rate, `(p - p_new) / lr`, which keeps the subtraction exact to float32's precision
of the gradient). Reported, as global relative errors against the float64 run (norms over every parameter):
- `update`: ||params - params64|| / ||params64 - initial|| after `--steps` AdamW steps (the error of what
  training changed; AdamW divides by the gradient's magnitude, so noise in small gradients weighs here);
- `gradient`: ||grad - grad64|| / ||grad64|| of the first step, per parameter too (`--per-parameter`).

    python benchmarks/numerics.py --json numerics.json                  # D=256, 4 layers, vocabulary 2048
    python benchmarks/numerics.py --layers 12 --d-model 768 --vocab 50257 --seq 128 --batch 4   # GPT-2 small

The issue's target (45): Slicer's error within 1.5x of torch float32's.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "torch"))

import train_step  # noqa: E402

import slicer  # noqa: E402

GRADIENT_LR = 1e5  # p_new = p - lr * g: with lr * |g| >> |p|, (p - p_new) / lr is g to float32's precision


def _torch_run(model, loss_fn, batch, dtype, optimizer: str, steps: int, lr: float) -> dict[str, np.ndarray]:
    model = copy.deepcopy(model).to(dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = (torch.optim.AdamW(params, lr, foreach=False) if optimizer == "adamw"
           else torch.optim.SGD(params, lr, foreach=False))
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(model, *batch).backward()
        opt.step()
    return {n: p.detach().double().numpy() for n, p in model.named_parameters()}


def _slicer_run(model, loss_fn, batch, optimizer, steps: int) -> dict[str, np.ndarray]:
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=1), tactics=[])
    with prog.session() as session:
        for _ in range(steps):
            session.step(*batch)
        state = session.state_dict()
    return {n: np.asarray(state[n], np.float64) for n, _ in model.named_parameters()}


def _relative(got: dict, want: dict, base: dict | None = None) -> float:
    error = sum(float(np.sum((got[n] - want[n]) ** 2)) for n in want)
    scale = sum(float(np.sum((want[n] - (base[n] if base else 0)) ** 2)) for n in want)
    return (error / scale) ** 0.5


def measure(args) -> dict:
    model, loss_fn, batch = train_step.gpt(batch=args.batch, seq=args.seq, d_model=args.d_model, n_head=args.heads,
                                           vocab=args.vocab, n_layer=args.layers)
    initial = {n: p.detach().double().numpy() for n, p in model.named_parameters()}
    lr = 1e-3
    reference = _torch_run(model, loss_fn, batch, torch.float64, "adamw", args.steps, lr)
    torch32 = _torch_run(model, loss_fn, batch, torch.float32, "adamw", args.steps, lr)
    ours = _slicer_run(model, loss_fn, batch, slicer.AdamW(lr), args.steps)
    grads = {}
    for name, dtype in (("float64", torch.float64), ("torch32", torch.float32)):
        after = _torch_run(model, loss_fn, batch, dtype, "sgd", 1, GRADIENT_LR)
        grads[name] = {n: (initial[n] - after[n]) / GRADIENT_LR for n in initial}
    after = _slicer_run(model, loss_fn, batch, slicer.SGD(GRADIENT_LR), 1)
    grads["slicer"] = {n: (initial[n] - after[n]) / GRADIENT_LR for n in initial}
    result = {
        "config": vars(args) | {"json": None},
        "update": {"torch_float32": _relative(torch32, reference, initial),
                   "slicer": _relative(ours, reference, initial)},
        "gradient": {"torch_float32": _relative(grads["torch32"], grads["float64"]),
                     "slicer": _relative(grads["slicer"], grads["float64"])},
    }
    for kind in ("update", "gradient"):
        result[kind]["ratio"] = result[kind]["slicer"] / result[kind]["torch_float32"]
    if args.per_parameter:
        result["gradient_per_parameter"] = {
            n: {"slicer": _relative({n: grads["slicer"][n]}, {n: grads["float64"][n]}),
                "torch_float32": _relative({n: grads["torch32"][n]}, {n: grads["float64"][n]})} for n in initial}
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--per-parameter", action="store_true")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args(argv)
    result = measure(args)
    for kind in ("update", "gradient"):
        r = result[kind]
        print(f"{kind:9s} relative error vs float64: slicer {r['slicer']:.3e}, torch float32 "
              f"{r['torch_float32']:.3e} ({r['ratio']:.2f}x)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
