"""Vocabulary parallelism (Megatron-LM, torchtitan) on a tiny GPT-style language model: the token embedding and
the LM head tiled over the vocabulary, and the cross-entropy computed on logits that stay tiled.

    h = ln(wte(idx));   logits = lm_head(h);   loss = cross_entropy(logits, targets)

With `wte.weight` and `lm_head.weight` tiled over their vocabulary dim (dim 0) on x, each device looks up the
tokens of its own rows (0 for the others: one all_reduce of [B, S, D] adds them up), computes its block of the
logits [B, S, V/k], and the loss reduces them where they are: the maximum of each row (an all_reduce by
maximum of [B*S]), the sum of exponentials and the target's logit (an all_reduce of [B*S] each). No
collective carries the logits. The same on the training step (`slicer.training_step`).

    python examples/torch/vocab_parallel.py     # the collectives on 2 devices and the loss against torch
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, D_MODEL, BATCH, SEQ = 512, 32, 2, 8
TACTICS = "wte.weight.0=x;lm_head.weight.0=x"
"""The vocabulary over x: the embedding's rows and the LM head's output features."""


class TinyLM(nn.Module):
    def __init__(self, vocab: int = VOCAB, d_model: int = D_MODEL):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.ln = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(self.ln(self.wte(idx)))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def tiny_lm(seed: int = 0):
    """(model, (token ids, targets)): random weights and random tokens, [BATCH, SEQ] each."""
    torch.manual_seed(seed)
    model = TinyLM().eval()
    return model, (torch.randint(0, VOCAB, (BATCH, SEQ)), torch.randint(0, VOCAB, (BATCH, SEQ)))


def loss_fn(model: TinyLM, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The training step's loss (`slicer.training_step(model, loss_fn, idx, targets, optimizer=...)`)."""
    return model(idx, targets)


if __name__ == "__main__":
    import slicer

    model, inputs = tiny_lm()
    prog = slicer.compile(slicer.from_torch(model, *inputs), mesh=slicer.Mesh(x=2),
                          tactics=slicer.parse_tactics(TACTICS))
    print(prog.explain())
    print("loss", float(prog.run(*inputs)), "torch", float(model(*inputs).detach()))
