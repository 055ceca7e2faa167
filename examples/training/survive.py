"""A GPT-2-small session (124M parameters, AdamW) run the way a training loop runs, through what ends runs:

    python examples/training/survive.py                 # GPT-2 small, data parallel on 2 MPI ranks (~5 min)
    python examples/training/survive.py --small         # the same loop on a small GPT (~30 s)

20 steps with a learning-rate schedule (linear warmup, then cosine) and gradient clipping by global norm
(`clip_grad_norm=1.0`), in one session (`Program.session`: parameters and optimizer state stay on the ranks).
On the way: `state_dict()` of the whole state at step 5, `save()` at step 10, and at step 12 a batch with a
token id past the vocabulary, which the step refuses (`slicer.KernelAssertionError`, the state as before it);
the loop goes on with the next good batch. Torch eager runs the same 20 good steps (torch.optim.AdamW,
foreach=False, `LambdaLR` with the same schedule, `clip_grad_norm_`). Printed: each step's loss next to
torch's, the times of `state_dict()` and `save()`, what the bad batch raised, and the largest relative error
of the final parameters with, past 1e-5, the state's distance from a float64 run against torch float32's; the
exit status is 1 unless both are within `TOLERANCE`'s bounds.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "zoo"))
from train import FLOAT64_FACTOR, distance, state_error
from zoo_models import NanoGPT, _lm_loss, freeze_key_biases

import slicer
from slicer import strategies as st

STEPS, STATE_AT, SAVE_AT, BAD_AT = 20, 5, 10, 12
LR, WARMUP, MIN_LR, CLIP = 6e-4, 5, 6e-5, 1.0
TOLERANCE = 1e-4
"""Losses within this of torch float32 (relative); the final parameters are judged as examples/zoo/train.py judges
them: within 1e-5 of torch float32, or the whole state no farther from a torch float64 run than 1.5x torch
float32's distance (AdamW turns rounding noise in near-zero gradients into updates of the learning rate's size)."""


def batches(vocab: int, batch: int, seq: int):
    """STEPS + 1 batches (token ids, targets): random tokens; the one at BAD_AT holds an id past the vocabulary."""
    g = torch.Generator().manual_seed(1)
    good = []
    for _ in range(STEPS):
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        good.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
    bad_idx = good[BAD_AT][0].clone()
    bad_idx[-1, -1] = vocab  # one token past the embedding's rows, in the last rank's half of the batch
    return good, (bad_idx, good[BAD_AT][1])


def schedule():
    return slicer.schedules.cosine(LR, total_steps=STEPS, warmup_steps=WARMUP, min_lr=MIN_LR)


def torch_run(model, good, dtype=torch.float32):
    """Torch eager in `dtype`: the same schedule (LambdaLR of the same factors), clipping and AdamW on the good
    batches."""
    model = copy.deepcopy(model).to(dtype)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], LR, foreach=False)
    lr_at = schedule()
    lambda_lr = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: lr_at(t) / LR)
    losses = []
    for idx, targets in good:
        opt.zero_grad()
        loss = _lm_loss(model, idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        lambda_lr.step()
        losses.append(loss.item())
    return losses, {n: p.detach().double().numpy() for n, p in model.named_parameters()}


def relative(got, want) -> float:
    want = np.asarray(want, np.float64)
    norm = float(np.linalg.norm(want))
    return float(np.linalg.norm(np.asarray(got, np.float64) - want)) / (norm or 1.0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a 2-layer D=64 GPT instead of GPT-2 small")
    parser.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args(argv)
    vocab, seq, batch, d, heads, layers = (256, 32, 4, 64, 4, 2) if args.small else (50257, 128, 4, 768, 12, 12)
    torch.manual_seed(0)
    model = freeze_key_biases(NanoGPT(vocab=vocab, block_size=seq, d=d, n_head=heads, n_layer=layers), "c_attn")
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
    good, bad = batches(vocab, batch, seq)
    optimizer = slicer.AdamW(schedule(), weight_decay=0.01, clip_grad_norm=CLIP)
    start = time.perf_counter()
    step = slicer.training_step(model, _lm_loss, *good[0], optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=args.ranks), tactics=st.data_parallel(step, "x"))
    print(f"import and compile: {time.perf_counter() - start:.1f} s")
    want_losses, want_params = torch_run(model, good)
    losses = []
    with prog.session(ranks=args.ranks, timeout=1800) as session:
        for t, (idx, targets) in enumerate(good):
            if t == BAD_AT:
                try:
                    session.step(*bad)
                    print("the bad batch was accepted: a bug")
                    return 1
                except slicer.KernelAssertionError as exc:
                    print(f"step {t}: the bad batch refused, state kept: {str(exc).splitlines()[0][:160]}")
            losses.append(float(session.step(idx, targets)))
            print(f"step {t}: loss {losses[-1]:.6f} (torch {want_losses[t]:.6f})")
            if t == STATE_AT:
                began = time.perf_counter()
                state = session.state_dict()
                print(f"  state_dict(): {len(state)} arrays, {sum(a.nbytes for a in state.values()) / 2**20:.0f} MiB"
                      f" in {time.perf_counter() - began:.1f} s")
            if t == SAVE_AT:
                began = time.perf_counter()
                with tempfile.TemporaryDirectory() as directory:
                    session.save(directory)
                    print(f"  save(): {time.perf_counter() - began:.1f} s")
        final = session.state_dict()
    loss_error = max(relative(g, w) for g, w in zip(losses, want_losses))
    _, exact = torch_run(model, good, torch.float64)
    initial = {n: p.detach().double().numpy() for n, p in model.named_parameters()}
    param_error, ratio = state_error(final, want_params, exact, initial)
    print(f"largest relative error: losses {loss_error:.2e}, final parameters {param_error:.2e}")
    ours, theirs = (distance(state, exact, initial) for state in (final, want_params))
    print(f"distance from a float64 run (of what training moved): Slicer {ours:.2e}, torch float32 {theirs:.2e}")
    return 0 if loss_error <= TOLERANCE and (ratio is None or ratio <= FLOAT64_FACTOR) else 1


if __name__ == "__main__":
    sys.exit(main())
