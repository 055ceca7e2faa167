"""Modules in training mode inside `slicer.training_step`: batch norm (running statistics updated by the step) and
dropout (masks computed in the program from the step's seed), compared with torch eager step after step.

Shared by the tests (test/unit/frontends/test_training_modes.py, test/mpi/test_training_modes_mpi.py) and runnable:

    python examples/torch/train_modes.py                # the simulator, data parallel over 2 devices
    python examples/torch/train_modes.py --ranks 2      # the same on 2 MPI ranks

- `resnet()`: a small ResNet-style CNN (conv + BatchNorm + ReLU, a strided conv, a residual block with a
  strided 1x1 projection) in training mode. Slicer's step computes batch norm's statistics over the whole global
  batch (under data parallel, SyncBatchNorm), so torch's reference is the unsharded model.
- `dropout_mlp()`: an MLP with two `nn.Dropout` layers. torch's reference replaces each dropout by the mask
  Slicer's step draws (`slicer.dropout_mask(seed, step, site, shape, p)`), so the two must agree to rounding.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step

import slicer


class ResNetish(nn.Module):
    """conv-BN-ReLU stem, a strided conv-BN-ReLU, a residual block (two conv-BN, a strided 1x1 projection with
    its BN on the shortcut), global average pooling and a linear classifier."""

    def __init__(self, channels: int = 3, width: int = 4, classes: int = 5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(2 * width), nn.ReLU())
        self.conv1 = nn.Conv2d(2 * width, 2 * width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(2 * width)
        self.conv2 = nn.Conv2d(2 * width, 2 * width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.down(self.stem(x))
        y = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(y)) + x)
        return self.fc(x.mean(dim=(2, 3)))


def resnet(seed: int = 0, batch: int = 4, size: int = 8):
    """(model in training mode, loss_fn, batch): `ResNetish` classifying random images (cross-entropy)."""
    torch.manual_seed(seed)
    model = ResNetish().train()

    def loss_fn(model, x, labels):
        return F.cross_entropy(model(x), labels)

    return model, loss_fn, (torch.randn(batch, 3, size, size), torch.randint(0, 5, (batch,)))


class DropoutMLP(nn.Module):
    def __init__(self, p: float = 0.3):
        super().__init__()
        self.fc1, self.drop1 = nn.Linear(8, 16), nn.Dropout(p)
        self.fc2, self.drop2 = nn.Linear(16, 16), nn.Dropout(p)
        self.fc3 = nn.Linear(16, 4)

    def forward(self, x):
        x = self.drop1(torch.tanh(self.fc1(x)))
        x = self.drop2(torch.tanh(self.fc2(x)))
        return self.fc3(x)


def dropout_mlp(seed: int = 0, batch: int = 8):
    """(model in training mode, loss_fn, batch): `DropoutMLP` regressing random targets (MSE)."""
    torch.manual_seed(seed)
    model = DropoutMLP().train()

    def loss_fn(model, x, y):
        return F.mse_loss(model(x), y)

    return model, loss_fn, (torch.randn(batch, 8), torch.randn(batch, 4))


class ReplayedDropout(nn.Module):
    """A stand-in for `nn.Dropout` in torch's reference: the mask Slicer's step draws at this site and step
    (`slicer.dropout_mask`), applied as torch's CPU dropout applies its own. `micro` = (i, k): the input is
    micro-batch i of k (rows i, i + k, ... of the batch, `training_step(..., microbatches=k)`), whose mask is
    those rows of the whole batch's."""

    def __init__(self, p: float, seed: int, site: int):
        super().__init__()
        self.p, self.seed, self.site, self.step = p, seed, site, 0
        self.micro = (0, 1)

    def forward(self, x):
        micro, count = self.micro
        shape = (x.shape[0] * count, *x.shape[1:])
        mask = slicer.dropout_mask(self.seed, self.step, self.site, shape, self.p)[micro::count]
        return x * (torch.from_numpy(np.ascontiguousarray(mask)).to(x.dtype) / (1 - self.p))


def replayed(model: nn.Module, seed: int) -> nn.Module:
    """A copy of `model` whose dropouts draw Slicer's masks (sites numbered in the forward's call order, which
    is their registration order in these models)."""
    model = copy.deepcopy(model)
    for site, (name, module) in enumerate([(n, m) for n, m in model.named_modules() if isinstance(m, nn.Dropout)]):
        parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
        setattr(parent, name.rpartition(".")[2], ReplayedDropout(module.p, seed, site))
    return model


def torch_steps(model, loss_fn, batch, optimizer, steps: int):
    """(losses, final parameters and buffers by name): `steps` steps of torch eager (torch.optim,
    foreach=False) on a copy of `model`, in its mode; replayed dropouts advance their step."""

    def advance(trained):
        for module in trained.modules():
            if isinstance(module, ReplayedDropout):
                module.step += 1

    trained: list = []
    losses, state = train_step.torch_steps(model, loss_fn, batch, optimizer, steps, after_step=advance,
                                           model_out=trained)
    state.update({n: b.numpy().copy() for n, b in trained[0].named_buffers()})
    return losses, state


def compare(model, loss_fn, batch, optimizer, prog, steps: int = 5, ranks=None, reference=None):
    """(largest relative error of the losses, of the final parameters and buffers, the state Slicer ended with)
    of `steps` steps of `prog` against torch eager on `reference` (default: `model`)."""
    want_losses, want = torch_steps(reference if reference is not None else model, loss_fn, batch, optimizer, steps)
    got_losses, got = train_step.slicer_steps(prog, batch, steps, ranks)
    loss_error = max(train_step.relative_error(g, w) for g, w in zip(got_losses, want_losses))
    state_error = max(train_step.relative_error(got[n], w) for n, w in want.items())
    return loss_error, state_error, got


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=None, help="MPI ranks (default: the in-process simulator)")
    args = parser.parse_args(argv)
    optimizer = slicer.AdamW(0.01)
    for name, (model, loss_fn, batch), seed in (("resnet", resnet(), 0), ("dropout", dropout_mlp(), 1234)):
        step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer, seed=seed)
        prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=slicer.strategies.data_parallel(step, "x"))
        reference = replayed(model, seed) if name == "dropout" else model
        loss_error, state_error, got = compare(model, loss_fn, batch, optimizer, prog, ranks=args.ranks,
                                               reference=reference)
        print(f"{name}: 5 AdamW steps, largest relative error of the losses {loss_error:.1e}, of the parameters and "
              f"buffers {state_error:.1e}" + (f"; rng after: {got['rng'].tolist()}" if "rng" in got else ""))
    np.set_printoptions(precision=4)


if __name__ == "__main__":
    main()
