"""A GPT-style decoder in PyTorch: token and position embeddings, `n_layer` GPT-2 blocks, a final layer norm
and an LM head (the layout of GPT-2 / nanoGPT, untied head).

    h = wte(idx) + wpe(arange(S));   h = block_i(h) for each i;   logits = lm_head(ln_f(h))

Parameters (names as tactics use them): wte.weight ([V, D]), wpe.weight ([S, D]), blocks.<i>.<block parameter>
(see gpt2_block.py), ln_f.weight/bias, lm_head.weight ([V, D]). The input `idx` is [B, S] token ids (int64).
Used by benchmarks/compile_scaling.py (decoders of 1 to 12 layers) and the scaling tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt2_block import GPT2Block


class GPT(nn.Module):
    def __init__(self, vocab: int = 64, seq: int = 8, d_model: int = 32, n_head: int = 4, n_layer: int = 2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(GPT2Block(d_model, n_head, max_len=seq) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        h = self.wte(idx) + self.wpe(positions)
        for block in self.blocks:
            h = block(h)
        return self.lm_head(self.ln_f(h))


def tiny_gpt(n_layer: int = 2, *, batch: int = 4, seq: int = 8, d_model: int = 32, n_head: int = 4,
             vocab: int = 64, seed: int = 0):
    """(model, example inputs): a small GPT in eval mode and a batch of random token ids."""
    torch.manual_seed(seed)
    model = GPT(vocab, seq, d_model, n_head, n_layer).eval()
    return model, (torch.randint(0, vocab, (batch, seq)),)


def strategies(n_layer: int, data: int = 2, model: int = 2) -> dict[str, tuple[str, dict[str, int]]]:
    """Strategy name -> (tactics as text, mesh) for a GPT of `n_layer` blocks (mesh axes: x data, of `data`
    devices, y model, of `model` devices).

    - data: the batch of token ids over x;
    - fsdp: data, then every parameter's dim 0 over x (ZeRO-3's layout; propagation gathers each where used);
    - megatron: attention heads and MLP hidden units of every block over y;
    - data_megatron: both, on a 2x2 mesh."""
    megatron = ";".join(
        f"blocks.{i}.{name}" for i in range(n_layer)
        for name in ("attn.c_proj.weight.1=y", "mlp.c_fc.weight.0=y", "mlp.c_fc.bias.0=y", "mlp.c_proj.weight.1=y"))
    return {
        "data": ("idx.0=x", {"x": data}),
        "fsdp": ("idx.0=x;" + ";".join(f"{p}.0=x" for p in _parameter_names(n_layer)), {"x": data}),
        "megatron": (megatron, {"y": model}),
        "data_megatron": ("idx.0=x;" + megatron, {"x": data, "y": model}),
    }


def _parameter_names(n_layer: int) -> list[str]:
    block = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
             "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
             "mlp.c_proj.weight", "mlp.c_proj.bias")
    return (["wte.weight", "wpe.weight"] + [f"blocks.{i}.{p}" for i in range(n_layer) for p in block]
            + ["ln_f.weight", "ln_f.bias", "lm_head.weight"])
