"""What a training-step fuzz case does around the model's forward (`training.py`): dropout in training mode,
gradient clipping, gradient accumulation over micro-batches and a learning-rate schedule -- drawn from the
case's seed, and the torch eager loop they stand for (the fuzzer's reference).

The features are drawn from their own `random.Random` (`draw_step_features`), after the model, loss, optimizer
and strategy: a seed draws the same model as before these features existed, and each feature is in a fair share
of the cases, independently (`SHARE`):
- `dropout` (p): an `nn.Dropout(p)` after each activation of an MLP (before its only linear layer if it has
  none) and after each ReLU of a convnet, in training mode. Slicer draws the masks in the program from the
  step's seed (`slicer.dropout_mask`); the reference replays them (examples/torch/train_modes.py's
  `ReplayedDropout`, sites in call order, told its micro-batch), so both compute with the same masks;
- `clip` ({"where", "kind", "limit"}): by global norm through the optimizer's `clip_grad_norm=`, or by norm or
  by value through `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` called in the loss function
  (`slicer.frontends.clipping`); the reference clips after the backward passes, before the update. The limits
  are chosen so that some steps clip and some do not;
- `microbatches` (k): `training_step(..., microbatches=k)`; the batch is drawn a multiple of k times the data
  devices, so that every micro-batch (rows i::k) is split over them as the batch is. The reference is torch's
  accumulation loop (`loss / k` per micro-batch, backward, then clip and step; the loss the sum of the parts);
- `schedule` ({"kind", ...}): the learning rate as a `slicer.schedules` schedule, evaluated by the session at
  each step; the reference multiplies torch's base rate by `LambdaLR` with the same factor.
"""

from __future__ import annotations

import copy
import functools
import random

SHARE = {"dropout": 0.35, "clip": 0.35, "microbatches": 0.35, "schedule": 0.3}
DROPOUT = (0.1, 0.3, 0.5)
CLIP_NORMS = (0.05, 0.5, 5.0)  # the small one clips every step, the large one rarely
CLIP_VALUES = (0.01, 0.1)


def draw_step_features(seed: int, data_devices: int) -> dict:
    """The step features of the case of `seed` (the `TrainingCase` fields they set, `batch` included when
    micro-batches need a multiple of their count): each feature absent or drawn (see the module docstring)."""
    rng = random.Random(f"training-steps:{seed}")
    features: dict = {}
    if rng.random() < SHARE["dropout"]:
        features["dropout"] = rng.choice(DROPOUT)
    if rng.random() < SHARE["clip"]:
        where = rng.choice(["optimizer", "loss"])
        kind = "norm" if where == "optimizer" or rng.random() < 0.7 else "value"
        features["clip"] = {"where": where, "kind": kind,
                            "limit": rng.choice(CLIP_NORMS if kind == "norm" else CLIP_VALUES)}
    if rng.random() < SHARE["microbatches"]:
        k = rng.choice([2, 2, 4])
        features["microbatches"] = k
        features["batch"] = data_devices * k * rng.choice([1, 2])
    if rng.random() < SHARE["schedule"]:
        features["schedule"] = rng.choice([
            {"kind": "linear_warmup", "warmup_steps": rng.choice([1, 2, 4]), "start_factor": rng.choice([0.0, 0.25])},
            {"kind": "cosine", "total_steps": rng.choice([3, 4]), "warmup_steps": rng.choice([0, 1]),
             "min_lr_factor": rng.choice([0.0, 0.1])},
            {"kind": "step_decay", "step_size": rng.choice([1, 2]), "gamma": rng.choice([0.5, 0.1])},
        ])
    return features


def make_schedule(lr: float, schedule: dict | None):
    """The `slicer.schedules` schedule `schedule` describes with base rate `lr` (`lr` itself when None)."""
    from slicer import schedules

    if schedule is None:
        return lr
    kind = schedule["kind"]
    if kind == "linear_warmup":
        return schedules.linear_warmup(lr, schedule["warmup_steps"], schedule["start_factor"])
    if kind == "cosine":
        return schedules.cosine(lr, schedule["total_steps"], schedule["warmup_steps"],
                                min_lr=lr * schedule["min_lr_factor"])
    return schedules.step_decay(lr, schedule["step_size"], schedule["gamma"])


def clipping_loss(loss_fn, clip: dict | None):
    """`loss_fn`, calling torch's clipping helper first when the case clips in the loss function (as a torch
    loop clips after its backward: Slicer records the call and clips between backward and update)."""
    if clip is None or clip["where"] != "loss":
        return loss_fn
    def clipped(model, *batch):
        import torch  # torch.nn.utils looked up at each call: Slicer's guard patches it while tracing

        if clip["kind"] == "norm":
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip["limit"])
        else:
            torch.nn.utils.clip_grad_value_(model.parameters(), clip["limit"])
        return loss_fn(model, *batch)

    return clipped


@functools.cache
def _train_modes():
    from example_modules import load  # test/: on the worker's path

    return load("torch/train_modes.py", "train_modes")


def torch_reference(case, model, loss_fn, batch):
    """(losses, final parameters by name) of `case.steps` steps of torch eager on a copy of `model` (in the
    dtype of `model` and `batch`): torch.optim (foreach=False) with the case's settings, LambdaLR for its
    schedule, its micro-batches accumulated, its dropouts replayed, its clipping between backward and step.
    `loss_fn` is the plain loss (no clipping call)."""
    import torch

    train_modes = _train_modes()
    model = train_modes.replayed(model, case.seed) if case.dropout else copy.deepcopy(model)
    trained = [p for p in model.parameters() if p.requires_grad]
    o = case.optimizer
    opt = (torch.optim.SGD(trained, o["lr"], momentum=o["momentum"], weight_decay=o["weight_decay"], foreach=False)
           if o["name"] == "sgd" else torch.optim.AdamW(trained, o["lr"], weight_decay=o["weight_decay"],
                                                        foreach=False))
    rate = make_schedule(o["lr"], case.schedule)
    scheduler = (torch.optim.lr_scheduler.LambdaLR(opt, lambda t: rate(t) / o["lr"])
                 if case.schedule is not None else None)
    replays = [m for m in model.modules() if isinstance(m, train_modes.ReplayedDropout)]
    k, losses = case.microbatches, []
    for _ in range(case.steps):
        opt.zero_grad()
        total = 0.0
        for micro in range(k):
            for replay in replays:
                replay.micro = (micro, k)
            loss = loss_fn(model, *(t[micro::k] for t in batch))
            loss = loss / k if k > 1 else loss
            loss.backward()
            total += loss.item()
        _clip(torch, case.clip, trained)
        opt.step()
        if scheduler is not None:
            scheduler.step()
        for replay in replays:
            replay.step += 1
        losses.append(total)
    return losses, {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def _clip(torch, clip: dict | None, trained) -> None:
    if clip is None:
        return
    if clip["kind"] == "norm":
        torch.nn.utils.clip_grad_norm_(trained, clip["limit"], foreach=False)
    else:
        torch.nn.utils.clip_grad_value_(trained, clip["limit"], foreach=False)
