"""A small convolutional network in PyTorch: two conv / BatchNorm / ReLU stages, global average pooling and a
linear classifier, run in eval mode (BatchNorm normalizes with its running statistics, its buffers).

    x [B, C, H, W] -> conv1 -> bn1 -> relu -> conv2 -> bn2 -> relu -> mean over H, W -> fc -> logits [B, classes]

Parameters (names as tactics use them): conv1.weight/bias, bn1.weight/bias, conv2.weight/bias, bn2.weight/bias,
fc.weight/bias; buffers bn1.running_mean/running_var/num_batches_tracked (and bn2's). Data parallelism tiles
the batch (`x.0=x`) and needs no collective: every op is per sample.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class SmallCNN(nn.Module):
    def __init__(self, channels: int = 3, width: int = 8, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


def randomized(model: SmallCNN, seed: int = 0) -> SmallCNN:
    """`model` with running statistics and affine parameters away from their initial 0/1 (so eval-mode
    BatchNorm computes something), in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for bn in (model.bn1, model.bn2):
            n = bn.num_features
            bn.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            bn.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
            bn.weight.copy_(torch.rand(n, generator=generator) + 0.5)
            bn.bias.copy_(torch.randn(n, generator=generator) * 0.1)
    return model.eval()
