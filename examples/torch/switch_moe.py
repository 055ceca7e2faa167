"""A GShard/Switch-style mixture-of-experts layer with a fixed capacity, as written for training at scale, and a
tiny model around it (examples/torch/README.md; issue 51).

Tokens come in groups (GShard: a group is a sequence, `x` is [G, S, D]); each token goes to its top-k experts,
each expert takes at most `capacity` tokens of a group (capacity = ceil(capacity_factor * k * S / E)); a token
routed to a full expert is dropped for that expert (its gate counts for nothing, the residual carries it).
Dispatch and combine are one-hot masks applied with einsum, the experts a stacked weight [E, D, F]:

    dispatched = einsum("gsec,gsd->egcd", dispatch, x)      # tokens into each expert's capacity slots
    h          = relu(einsum("egcd,edf->egcf", dispatched, w1))
    y          = einsum("egcf,efd->egcd", h, w2)
    out        = einsum("gsec,egcd->gsd", combine, y)      # back to the tokens, weighted by their gates

A slot's position is the token's rank among the group's tokens routed to that expert (a cumsum over S; the
second choices queue after all first choices, as in GShard). Switch's load-balancing loss, E x sum_e
(fraction of first choices on e) x (mean router probability of e), is added to the training loss.

The same layer with indexed dispatch and combine (`form="gather"`): each capacity slot's token index, the
tokens gathered into the slots (`torch.gather`) and the gated outputs added back (`scatter_add`); the import
writes both as one-hot selects and sums (slicer/frontends/decomp_indexing.py).

Under `slicer.strategies.expert_parallel` with data parallel on the same axis (dp2ep), the groups are tiled over
the axis and the experts (dim 0 of experts_w1, experts_w2) too: `dispatched` is made group-tiled and used
expert-tiled, so the partitioner moves it to the experts by all_to_all (test/unit/api/test_expert_parallel.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_step import slicer_steps, torch_steps

import slicer
from slicer import strategies as st


class SwitchMoE(nn.Module):
    """Top-k routing with a capacity per expert and group; experts are ReLU MLPs stacked as experts_w1 [E, D, F],
    experts_w2 [E, F, D]. `forward` keeps the load-balancing loss of its last call in `aux_loss`."""

    def __init__(self, d_model: int, hidden: int, experts: int, top_k: int = 2, capacity_factor: float = 1.25,
                 form: str = "einsum"):
        super().__init__()
        self.num_experts, self.top_k, self.capacity_factor, self.form = experts, top_k, capacity_factor, form
        self.router = nn.Linear(d_model, experts, bias=False)
        if form == "list":  # one module per expert (imported stacked: slicer.training_step(..., stacked=...))
            self.experts = nn.ModuleList(Expert(d_model, hidden) for _ in range(experts))
        else:
            self.experts_w1 = nn.Parameter(torch.randn(experts, d_model, hidden) / math.sqrt(d_model))
            self.experts_w2 = nn.Parameter(torch.randn(experts, hidden, d_model) / math.sqrt(hidden))
        self.aux_loss = torch.zeros(())

    def capacity(self, tokens: int) -> int:
        return max(1, math.ceil(self.capacity_factor * self.top_k * tokens / self.num_experts))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(dispatch, combine): [G, S, E, C] masks, 1 (the gate) where token s fills slot c of expert e."""
        capacity = self.capacity(x.shape[1])
        probs = F.softmax(self.router(x), dim=-1)                         # [G, S, E]
        gates, chosen = torch.topk(probs, self.top_k, dim=-1)             # [G, S, k]
        gates = gates / gates.sum(dim=-1, keepdim=True)
        slots = torch.arange(capacity, dtype=x.dtype)
        dispatch = combine = torch.zeros(())
        taken = torch.zeros_like(probs[:, :1, :])                         # [G, 1, E] slots already filled
        for i in range(self.top_k):
            mask = F.one_hot(chosen[..., i], self.num_experts).to(x.dtype)    # [G, S, E]
            position = torch.cumsum(mask, dim=1) - 1 + taken              # rank among the expert's tokens
            taken = taken + mask.sum(dim=1, keepdim=True)
            # the slot's one-hot; a position >= capacity matches no slot: the token is dropped
            slot = mask.unsqueeze(-1) * (position.unsqueeze(-1) == slots).to(x.dtype)      # [G, S, E, C]
            dispatch = dispatch + slot
            combine = combine + slot * gates[..., i, None, None]
            if i == 0:
                fraction = mask.mean(dim=1)                                # [G, E] first choices per expert
                self.aux_loss = self.num_experts * (fraction * probs.mean(dim=1)).sum(dim=-1).mean()
        return dispatch, combine

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dispatch, combine = self.route(x)
        if self.form == "gather":
            return self.gathered(x, dispatch, combine)
        if self.form == "index":
            return self.indexed(x, dispatch, combine)
        dispatched = torch.einsum("gsec,gsd->egcd", dispatch, x)
        if self.form == "list":
            y = torch.stack([expert(dispatched[e]) for e, expert in enumerate(self.experts)])
            return torch.einsum("gsec,egcd->gsd", combine, y)
        h = F.relu(torch.einsum("egcd,edf->egcf", dispatched, self.experts_w1))
        y = torch.einsum("egcf,efd->egcd", h, self.experts_w2)
        return torch.einsum("gsec,egcd->gsd", combine, y)

    def gathered(self, x: torch.Tensor, dispatch: torch.Tensor, combine: torch.Tensor) -> torch.Tensor:
        """The same layer with indexed dispatch and combine: each slot's token index (S for an empty slot, a
        row of zeros), `torch.gather` of the tokens into the slots, `scatter_add` of the gated outputs back."""
        groups, seq, d = x.shape
        slots = dispatch.shape[2] * dispatch.shape[3]
        filled = dispatch.sum(dim=1)                                                  # [G, E, C]
        token = (dispatch * torch.arange(seq, dtype=x.dtype)[:, None, None]).sum(dim=1) + (1 - filled) * seq
        index = token.long().reshape(groups, slots, 1).expand(groups, slots, d)
        padded = torch.cat([x, torch.zeros(groups, 1, d, dtype=x.dtype)], dim=1)
        dispatched = torch.gather(padded, 1, index).view(*dispatch.shape[:1], *dispatch.shape[2:], d)
        h = F.relu(torch.einsum("gecd,edf->egcf", dispatched, self.experts_w1))
        y = torch.einsum("egcf,efd->gecd", h, self.experts_w2) * combine.sum(dim=1)[..., None]
        out = torch.zeros(groups, seq + 1, d, dtype=x.dtype).scatter_add(1, index, y.reshape(groups, slots, d))
        return out[:, :seq]


    def indexed(self, x: torch.Tensor, dispatch: torch.Tensor, combine: torch.Tensor) -> torch.Tensor:
        """The same layer on flat tokens: each slot's row of the tokens flattened to [G * (S + 1), D] (a row of
        zeros after each group's, for the empty slots), `index_select` of the slots' rows, `index_add_` of the
        gated outputs back."""
        groups, seq, d = x.shape
        filled = dispatch.sum(dim=1)                                                  # [G, E, C]
        token = (dispatch * torch.arange(seq, dtype=x.dtype)[:, None, None]).sum(dim=1) + (1 - filled) * seq
        row = (token + (seq + 1) * torch.arange(groups, dtype=x.dtype)[:, None, None]).long().reshape(-1)
        flat = torch.cat([x, torch.zeros(groups, 1, d, dtype=x.dtype)], dim=1).reshape(-1, d)
        dispatched = flat.index_select(0, row).view(*dispatch.shape[:1], *dispatch.shape[2:], d)
        h = F.relu(torch.einsum("gecd,edf->egcf", dispatched, self.experts_w1))
        y = torch.einsum("egcf,efd->gecd", h, self.experts_w2) * combine.sum(dim=1)[..., None]
        out = torch.zeros(groups * (seq + 1), d, dtype=x.dtype).index_add_(0, row, y.reshape(-1, d))
        return out.view(groups, seq + 1, d)[:, :seq]


class Expert(nn.Module):
    """One expert of `form="list"`: a ReLU MLP of two bias-free linear layers."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.relu(self.w1(x)))


class Block(nn.Module):
    """Pre-norm residual MoE block: x + moe(norm(x))."""

    def __init__(self, d_model: int, hidden: int, experts: int, top_k: int, capacity_factor: float,
                 form: str = "einsum"):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.moe = SwitchMoE(d_model, hidden, experts, top_k, capacity_factor, form)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.moe(self.norm(x))


class MoEModel(nn.Module):
    """`layers` MoE blocks and a linear head regressing to a target of the same shape."""

    def __init__(self, d_model=16, hidden=32, experts=4, top_k=2, capacity_factor=1.25, layers=1, form="einsum"):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d_model, hidden, experts, top_k, capacity_factor, form)
                                    for _ in range(layers))
        self.head = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


AUX_WEIGHT = 0.01


def loss_fn(model: MoEModel, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error plus the load-balancing losses of every MoE layer."""
    loss = F.mse_loss(model(x), target)
    return loss + AUX_WEIGHT * sum(block.moe.aux_loss for block in model.blocks)


def switch_moe(seed=0, groups=4, seq=8, d_model=16, hidden=32, experts=4, top_k=2, capacity_factor=1.25, layers=1,
               form="einsum"):
    """(model, loss_fn, (x, target)): the model and a batch of `groups` sequences of `seq` tokens; `form`:
    "einsum" (one-hot dispatch and combine), "gather" (`SwitchMoE.gathered`), "index" (`SwitchMoE.indexed`) or
    "list" (the einsum form with an nn.ModuleList of `Expert`s, each applied to its slice of the dispatched
    tokens and the outputs stacked)."""
    torch.manual_seed(seed)
    model = MoEModel(d_model, hidden, experts, top_k, capacity_factor, layers, form if form == "list" else "einsum")
    for block in model.blocks:
        block.moe.form = form
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(groups, seq, d_model, generator=g)
    return model, loss_fn, (x, torch.randn(groups, seq, d_model, generator=g))


def main(argv=None) -> None:
    """Train a few steps under expert parallel x data (dp2ep) on the simulator or MPI ranks, next to torch."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=None, help="MPI ranks (default: the simulator, 2 devices)")
    args = parser.parse_args(argv)
    devices = args.ranks or 2
    model, loss, batch = switch_moe(groups=2 * devices)
    optimizer = slicer.AdamW(0.01)
    step = slicer.training_step(model, loss, *batch, optimizer=optimizer)
    tactics = st.expert_parallel(step, "x", mesh={"x": devices}) + st.data_parallel(step, "x")
    prog = slicer.compile(step, mesh=slicer.Mesh(x=devices), tactics=tactics)
    got, _ = slicer_steps(prog, batch, 3, args.ranks)
    want, _ = torch_steps(model, loss, batch, optimizer, 3)
    for i, (g, w) in enumerate(zip(got, want)):
        print(f"step {i}: loss {g:.6f} (torch {w:.6f})")


if __name__ == "__main__":
    main()
