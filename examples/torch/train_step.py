"""Training steps imported with `slicer.training_step`, run step after step and compared with torch.optim.

Shared by the tests (test/unit/frontends/test_training_step.py, test/mpi/test_training_step.py) and runnable:

    python examples/torch/train_step.py                 # a GPT of 2 blocks (D=256, vocabulary 512, sequence 64)
    python examples/torch/train_step.py --ranks 2       # the same on 2 MPI ranks

It times the import and `slicer.compile` of the step under data parallel (the batch over x=2), runs 5 steps
in a session (`Program.session`: parameters and optimizer state stay on the ranks), and prints the losses
next to torch's (torch.optim, foreach=False) and the largest relative error of the final parameters.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt import GPT

import slicer


def mlp(seed: int = 0, batch: int = 8):
    """(model, loss_fn, batch): a 2-layer MLP (8 -> 16 -> 4, tanh) regressing random targets (MSE)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))

    def loss_fn(model, x, y):
        return F.mse_loss(model(x), y)

    return model, loss_fn, (torch.randn(batch, 8), torch.randn(batch, 4))


def gpt(seed: int = 0, *, batch: int = 4, seq: int = 8, d_model: int = 32, n_head: int = 4, vocab: int = 64,
        n_layer: int = 2):
    """(model, loss_fn, batch): examples/torch/gpt.py's GPT predicting the next token of random sequences
    (cross-entropy over the vocabulary); the batch is the token ids `idx` and their `targets`, shifted by one."""
    torch.manual_seed(seed)
    model = GPT(vocab, seq, d_model, n_head, n_layer)
    tokens = torch.randint(0, vocab, (batch, seq + 1))

    def loss_fn(model, idx, targets):
        logits = model(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, loss_fn, (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())


def freeze_attention_bias(model) -> None:
    """Make the QKV projections' biases of `model` (a GPT) untrained, for AdamW comparisons. The keys' bias has
    no gradient in exact arithmetic (softmax ignores what it adds to a whole row of scores): torch and Slicer
    both compute rounding noise there (1e-10 against 1e-3 for the queries'), in different orders, and Adam
    divides that noise by its own magnitude, so the updates differ by up to the learning rate."""
    for block in model.blocks:
        block.attn.c_attn.bias.requires_grad_(False)


def torch_optimizer(optimizer, params):
    """The torch.optim optimizer `optimizer` (slicer.SGD or slicer.AdamW) stands for, single-tensor path."""
    if isinstance(optimizer, slicer.SGD):
        return torch.optim.SGD(params, optimizer.lr, momentum=optimizer.momentum,
                               weight_decay=optimizer.weight_decay, foreach=False)
    return torch.optim.AdamW(params, optimizer.lr, betas=optimizer.betas, eps=optimizer.eps,
                             weight_decay=optimizer.weight_decay, foreach=False)


def torch_steps(model, loss_fn, batch, optimizer, steps: int, *, after_step=None, model_out: list | None = None,
                dtype=None):
    """(losses, final parameters by name): `steps` steps of torch eager on a copy of `model`. `after_step(copy)`
    runs after each step (e.g. advancing replayed dropout masks); `model_out` receives the trained copy. `dtype`
    (e.g. torch.bfloat16): the copy and the batch's floating tensors converted to it first, the parameters
    returned as float64 (numpy has no bfloat16)."""
    model = copy.deepcopy(model) if dtype is None else copy.deepcopy(model).to(dtype)
    if dtype is not None:
        batch = tuple(b.to(dtype) if b.is_floating_point() else b for b in batch)
    opt = torch_optimizer(optimizer, [p for p in model.parameters() if p.requires_grad])
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model, *batch)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if after_step is not None:
            after_step(model)
    if model_out is not None:
        model_out.append(model)
    if dtype is not None:
        return losses, {n: p.detach().double().numpy() for n, p in model.named_parameters()}
    return losses, {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def slicer_steps(prog, batch, steps: int, ranks=None):
    """(losses, final state by argument name): `steps` steps of `prog` (a compiled training step) in a session
    (`Program.session`: the parameters and optimizer state stay where they run, each step sends the batch)."""
    with prog.session(ranks=ranks, timeout=300) as session:
        losses = [float(session.step(*batch)) for _ in range(steps)]
        return losses, session.state_dict()


def relative_error(got, want) -> float:
    """|got - want| / |want| (Frobenius norms; absolute when want is 0)."""
    want = np.asarray(want, np.float64)
    diff = float(np.linalg.norm(np.asarray(got, np.float64) - want))
    norm = float(np.linalg.norm(want))
    return diff / norm if norm else diff


def compare(model, loss_fn, batch, optimizer, prog, steps: int = 5, ranks=None) -> tuple[float, float]:
    """(largest relative error of the losses, of the final parameters) of `steps` steps of `prog` against
    torch eager."""
    want_losses, want_params = torch_steps(model, loss_fn, batch, optimizer, steps)
    got_losses, got_values = slicer_steps(prog, batch, steps, ranks)
    want_params = stacked(want_params, got_values)
    loss_error = max(relative_error(g, w) for g, w in zip(got_losses, want_losses))
    param_error = max(relative_error(got_values[n], w) for n, w in want_params.items())
    return loss_error, param_error


def stacked(params: dict, names) -> dict:
    """`params` (name -> array) with the experts of each ModuleList the step imported stacked (a name of `names`
    such as `moe.experts.w1.weight`, not in `params`, is the members `moe.experts.<i>.w1.weight` stacked on a
    new dim 0, `slicer.training_step(..., stacked=...)`) in place of the members."""
    params = dict(params)
    for name in names:
        parts = name.split(".")
        for cut in range(1, len(parts)):
            members = []
            while (member := ".".join([*parts[:cut], str(len(members)), *parts[cut:]])) in params:
                members.append(member)
            if name not in params and members:
                params[name] = np.stack([params.pop(m) for m in members])
    return params


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=None, help="MPI ranks (default: the in-process simulator)")
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)
    model, loss_fn, batch = gpt(batch=args.batch, seq=64, d_model=256, n_head=4, vocab=512)
    freeze_attention_bias(model)
    for optimizer in (slicer.SGD(0.1, momentum=0.9), slicer.AdamW(1e-3)):
        start = time.perf_counter()
        step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
        imported = time.perf_counter()
        prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="idx", dim=0, axes="x")])
        compiled = time.perf_counter()
        print(f"{optimizer}: training_step {imported - start:.2f} s, slicer.compile {compiled - imported:.2f} s "
              f"(data parallel on x=2)")
        losses, values = slicer_steps(prog, batch, 5, args.ranks)
        want_losses, want_params = torch_steps(model, loss_fn, batch, optimizer, 5)
        for i, (got, want) in enumerate(zip(losses, want_losses)):
            print(f"  step {i}: loss {got:.6f} (torch {want:.6f})")
        print(f"  final parameters: largest relative error "
              f"{max(relative_error(values[n], w) for n, w in want_params.items()):.2e}")


if __name__ == "__main__":
    main()
