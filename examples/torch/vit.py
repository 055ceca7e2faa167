"""A Vision Transformer (ViT) in plain PyTorch, as timm and the ViT paper write it: a patch embedding (a Conv2d
whose kernel and stride are the patch size), a learned class token prepended to the patches, a learned
position embedding, pre-norm encoder blocks (multi-head self-attention with a fused QKV projection, a gelu MLP,
residuals), a final layer norm and a linear classifier on the class token.

    x = [cls; patch_embed(images)] + pos_embed;   x = block_i(x) for each i;   logits = head(norm(x)[:, 0])

Parameters (names as tactics use them): cls_token ([1, 1, D]), pos_embed ([1, N + 1, D]), patch_embed.weight
([D, C, P, P]) and .bias, blocks.<i>.norm1/norm2.weight/bias, blocks.<i>.attn.qkv.weight ([3D, D]) and .bias,
blocks.<i>.attn.proj.weight ([D, D]) and .bias, blocks.<i>.mlp.fc1.weight ([4D, D]) and .bias,
blocks.<i>.mlp.fc2.weight ([D, 4D]) and .bias, norm.weight/bias, head.weight ([classes, D]) and .bias.
The input `images` is [B, C, H, W] float32.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, d_model = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.n_head, d_model // self.n_head).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each [B, heads, N, D / heads]
        scores = (q @ k.transpose(-2, -1)) * (d_model // self.n_head) ** -0.5
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, d_model))


class MLP(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_head)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image: int = 16, patch: int = 4, channels: int = 3, d_model: int = 32, n_head: int = 4,
                 n_layer: int = 2, classes: int = 10):
        super().__init__()
        patches = (image // patch) ** 2
        self.patch_embed = nn.Conv2d(channels, d_model, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, patches + 1, d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # [B, N, D]
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


def tiny_vit(n_layer: int = 2, *, batch: int = 4, image: int = 16, patch: int = 4, d_model: int = 32,
             n_head: int = 4, seed: int = 0):
    """(model, example inputs): a small ViT in eval mode and a batch of random images."""
    torch.manual_seed(seed)
    model = ViT(image, patch, 3, d_model, n_head, n_layer).eval()
    return model, (torch.randn(batch, 3, image, image),)


def megatron(n_layer: int = 2) -> str:
    """Megatron over y: every block's heads (the output projection's input dim) and MLP hidden units."""
    return ";".join(f"blocks.{i}.{t}" for i in range(n_layer)
                    for t in ("attn.proj.weight.1=y", "mlp.fc1.weight.0=y", "mlp.fc1.bias.0=y", "mlp.fc2.weight.1=y"))
