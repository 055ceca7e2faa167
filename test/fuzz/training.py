"""Training-step fuzz cases: a small random model (an MLP or a convnet), loss, optimizer and strategy, trained
for a few steps by Slicer and by torch eager, compared step by step (runs inside a worker, see `worker.py`).

A case is JSON-able (`TrainingCase.to_json`) and drawn from a seed (`generate_training_case`), so a failure is
replayed from its seed alone. The model is built by torch from the case's description:
- `mlp`: 1-3 linear layers of widths from {4, 8, 12, 16}, an activation between them, optionally a LayerNorm
  after the first, with or without biases; loss MSE against random targets or cross-entropy against random
  labels;
- `conv`: Conv2d (3x3, padding 1) and ReLU, optionally a second conv, then flatten and a linear classifier
  (the flatten merges the channels with the pixels: Megatron's column split of the conv's output channels
  becomes a split of the classifier's input features).
Strategies (`slicer.strategies`): data parallel, ZeRO-1/2/3 over x of size 1, 2 or 4; Megatron over y of size 2
or 4 (column and row alternating over the layers); data + Megatron on 2x2. Sizes divide the mesh.
Around the model (`training_steps.py`, each in about a third of the cases, drawn from their own random stream so
that a seed draws the same model as before): dropout in training mode (the reference replays Slicer's masks),
gradient clipping (the optimizer's `clip_grad_norm=`, or torch's clipping helpers called in the loss function),
gradient accumulation (`microbatches=k`, the batch a multiple of k times the data devices) and a learning-rate
schedule (`slicer.schedules` against torch's LambdaLR). The reference is torch eager's loop with all of them.

Classes as in `execute.py`: `ok`; `clean-error` (importing, a strategy helper or `slicer.compile` raised a
documented SlicerError); `internal-error` (anything else, and any failure once compiled); `wrong` (a loss or
final parameter differs from torch's by more than `TOLERANCE`, relative, and from torch's in float64 by more
than torch's own float32 run does, twice over, `CONDITIONING`); `hang` (decided by the parent).

The float64 check: AdamW divides a gradient by its root mean square plus 1e-8, so a gradient at rounding level
(a ReLU unit just past zero) moves its weights by up to the learning rate on rounding alone. Seed 4747014836 (an
MLP, Megatron on y=2) differed from torch float32 by 1.1e-3, unpartitioned as much as partitioned; torch float32
itself differed from float64 by 8.8e-4, and Slicer from float64 by 2.0e-4: torch's rounding, not a wrong answer."""

from __future__ import annotations

import functools
import math
import random
import time
from dataclasses import asdict, dataclass, field, replace
from typing import NamedTuple

from .errors import signature
from .execute import Outcome, _error
from .training_steps import clipping_loss, draw_step_features, make_schedule, torch_reference

TOLERANCE = 1e-4  # float32, different summation orders, a few optimizer steps
CONDITIONING = 2.0  # past TOLERANCE: Slicer's error against float64 torch, over torch float32's own
STEPS = 3
WIDTHS = (4, 8, 12, 16)


@dataclass
class TrainingCase:
    model: dict  # {"kind": "mlp"|"conv", ...} see `build_model`
    loss: str  # "mse" | "ce"
    optimizer: dict  # {"name": "sgd"|"adamw", hyperparameters}
    strategy: str  # "data" | "zero1" | "zero2" | "zero3" | "megatron" | "data+megatron"
    mesh: dict[str, int]
    batch: int
    seed: int = 0
    steps: int = STEPS
    valid: bool = field(default=True, compare=False)  # schedules are drawn valid (sizes divide)
    # The step's features (`training_steps.py`); the defaults are a case drawn before they existed.
    dropout: float = 0.0  # p of the nn.Dropout after each activation (0: none)
    clip: dict | None = None  # {"where": "optimizer"|"loss", "kind": "norm"|"value", "limit": x}
    microbatches: int = 1  # training_step(..., microbatches=k); batch a multiple of k times the data devices
    schedule: dict | None = None  # the learning rate's schedule (`training_steps.make_schedule`)

    @property
    def tactics(self) -> list[str]:
        """The strategy (never empty: what the summary's "cases without tactics" counts)."""
        return [self.strategy]

    @property
    def devices(self) -> int:
        return math.prod(self.mesh.values())

    def to_json(self) -> dict:
        return {"training": asdict(self)}

    @staticmethod
    def from_json(d: dict) -> TrainingCase:
        return TrainingCase(**d["training"])

    def reproducer(self) -> str:
        extras = "".join(f", {name} {getattr(self, name)}" for name in ("dropout", "clip", "microbatches", "schedule")
                         if getattr(self, name) not in (0.0, None, 1))
        return (f"training case (seed {self.seed}): model {self.model}, loss {self.loss}, optimizer {self.optimizer}, "
                f"strategy {self.strategy} on {self.mesh}, batch {self.batch}, {self.steps} steps{extras}\n"
                f"replay: python -c \"from fuzz.training import *; print(execute_training("
                f"generate_training_case({self.seed})))\" (from test/)\n")


def generate_training_case(seed: int) -> TrainingCase:
    """The case of `seed`: every choice from one `random.Random(seed)`."""
    rng = random.Random(f"training:{seed}")
    strategy = rng.choice(["data", "zero1", "zero2", "zero3", "megatron", "megatron", "data+megatron"])
    if strategy == "megatron":
        mesh = {"y": rng.choice([2, 4])}
    elif strategy == "data+megatron":
        mesh = {"x": 2, "y": 2}
    else:
        mesh = {"x": rng.choice([1, 2, 4])}
    y = mesh.get("y", 1)
    if rng.random() < 0.7:
        layers = rng.choice([1, 2, 2, 3]) if strategy not in ("megatron", "data+megatron") else rng.choice([2, 3])
        widths = [rng.choice(WIDTHS) for _ in range(layers + 1)]
        if y > 1:  # Megatron splits the hidden widths (the outputs of column layers)
            widths[1:-1] = [w if w % y == 0 else 4 * y for w in widths[1:-1]]
        model = {"kind": "mlp", "widths": widths, "activation": rng.choice(["tanh", "relu", "gelu", "sigmoid"]),
                 "layernorm": rng.random() < 0.3, "bias": rng.random() < 0.8}
    else:
        model = {"kind": "conv", "channels": [rng.choice([1, 2, 3]), rng.choice([4, 8])],
                 "second_conv": rng.random() < 0.4, "image": rng.choice([4, 6]), "classes": rng.choice([3, 4])}
        if model["channels"][1] % y:
            model["channels"][1] = 4 * y
    loss = rng.choice(["mse", "ce"])
    if rng.random() < 0.5:
        optimizer = {"name": "sgd", "lr": rng.choice([0.1, 0.05]), "momentum": rng.choice([0.0, 0.9]),
                     "weight_decay": rng.choice([0.0, 0.01])}
    else:
        optimizer = {"name": "adamw", "lr": rng.choice([0.01, 0.001]), "weight_decay": rng.choice([0.0, 0.1])}
    batch = mesh.get("x", 1) * rng.choice([1, 2, 4])
    case = TrainingCase(model, loss, optimizer, strategy, mesh, batch, seed)
    return replace(case, **draw_step_features(seed, mesh.get("x", 1)))


class Built(NamedTuple):
    """What `build` makes of a case: the model (training mode), the loss function Slicer traces (`loss_fn`,
    with the case's clipping call if it clips in the loss) and the plain one torch's reference runs (`plain`),
    the batch tensors, the slicer optimizer, and the Megatron column/row patterns."""

    model: object
    loss_fn: object
    plain: object
    batch: tuple
    optimizer: object
    megatron: dict


def build(case: TrainingCase) -> Built:
    """The model, loss functions, batch and slicer optimizer of `case` (`Built`)."""
    import torch
    from torch.nn import functional as F

    import slicer

    torch.manual_seed(case.seed)
    model, x, out, linears = _mlp(case) if case.model["kind"] == "mlp" else _conv(case)
    # Megatron: column (output features) then row (input features), alternating; the LayerNorm between a
    # column layer and the next stays whole (it normalizes over the split features: a legal, gathered case).
    column = [f"{name}.*" for name in linears[0:-1:2]]
    row = [f"{name}.weight" for name in linears[1::2]]
    if case.loss == "mse":
        target = torch.randn(case.batch, out)

        def loss_fn(model, x, y):
            return F.mse_loss(model(x), y)
    else:
        target = torch.randint(0, out, (case.batch,))

        def loss_fn(model, x, y):
            return F.cross_entropy(model(x), y)
    o = case.optimizer
    lr = make_schedule(o["lr"], case.schedule)
    norm = case.clip["limit"] if case.clip and case.clip["where"] == "optimizer" else None
    optimizer = (slicer.SGD(lr, momentum=o["momentum"], weight_decay=o["weight_decay"], clip_grad_norm=norm)
                 if o["name"] == "sgd" else slicer.AdamW(lr, weight_decay=o["weight_decay"], clip_grad_norm=norm))
    return Built(model, clipping_loss(loss_fn, case.clip), loss_fn, (x, target), optimizer,
                 {"column": column, "row": row})


def _mlp(case: TrainingCase):
    """(model, input batch, output width, names of the linear layers) of an MLP case: `nn.Dropout` after each
    activation (before the only linear layer of a 1-layer MLP) when the case drops out."""
    import torch
    from torch import nn

    spec = case.model
    widths, layers = spec["widths"], []
    act = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "sigmoid": nn.Sigmoid}[spec["activation"]]
    if case.dropout and len(widths) == 2:
        layers.append(nn.Dropout(case.dropout))
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1], bias=spec["bias"]))
        if i < len(widths) - 2:
            if i == 0 and spec["layernorm"]:
                layers.append(nn.LayerNorm(widths[1]))
            layers.append(act())
            if case.dropout:
                layers.append(nn.Dropout(case.dropout))
    model = nn.Sequential(*layers).train()
    linears = [str(i) for i, m in enumerate(model) if isinstance(m, nn.Linear)]
    return model, torch.randn(case.batch, widths[0]), widths[-1], linears


def _conv(case: TrainingCase):
    """(model, input batch, classes, names of the conv and linear layers) of a convnet case: `nn.Dropout`
    after each ReLU when the case drops out (masks over [B, C, H, W])."""
    import torch
    from torch import nn

    spec = case.model
    (c_in, c), image = spec["channels"], spec["image"]
    drop = [nn.Dropout(case.dropout)] if case.dropout else []
    layers = [nn.Conv2d(c_in, c, 3, padding=1), nn.ReLU(), *drop]
    if spec["second_conv"]:
        layers += [nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), *([nn.Dropout(case.dropout)] if drop else [])]
    layers += [nn.Flatten(), nn.Linear(c * image * image, spec["classes"])]
    model = nn.Sequential(*layers).train()
    linears = [str(i) for i, m in enumerate(model) if isinstance(m, (nn.Linear, nn.Conv2d))]
    return model, torch.randn(case.batch, c_in, image, image), spec["classes"], linears


def strategy_tactics(case: TrainingCase, step, megatron: dict):
    import slicer
    from slicer import strategies as st

    if case.strategy == "data":
        return st.data_parallel(step, "x")
    if case.strategy.startswith("zero"):  # with the mesh: state whose dim 0 x does not divide stays whole
        return st.zero(step, "x", stage=int(case.strategy[-1]), mesh=slicer.Mesh(**case.mesh))
    tactics = st.megatron(step, "y", **megatron)
    return st.data_parallel(step, "x") + tactics if case.strategy == "data+megatron" else tactics


@functools.cache
def reference():
    """examples/torch/train_step.py: the torch eager steps (`torch_steps`, with the torch.optim optimizer a slicer
    optimizer stands for) and the error measure (`relative_error`) the training tests use too."""
    from example_modules import load  # test/: on the worker's path

    return load("torch/train_step.py", "train_step")


def execute_training(case: TrainingCase, *, mpi: bool = False, mpi_timeout: float = 120.0,
                     corrupt: bool = False) -> Outcome:
    """Train `case` with Slicer (simulator, and MPI ranks with `mpi`) and torch, classify the outcome.
    `corrupt` perturbs Slicer's first loss (to check that the checker catches wrong answers)."""
    start = time.perf_counter()
    outcome = _execute(case, mpi=mpi, mpi_timeout=mpi_timeout, corrupt=corrupt)
    outcome.seconds = round(time.perf_counter() - start, 3)
    return outcome


def _within_torch_rounding(case: TrainingCase, losses, state, torch32) -> bool:
    """Slicer's losses and parameters are as close to torch's in float64 as `CONDITIONING` times torch float32's
    own (see the module docstring): the case is ill-conditioned in float32, not wrongly partitioned."""
    built = build(case)
    batch64 = tuple(t.double() if t.is_floating_point() else t for t in built.batch)
    want = torch_reference(case, built.model.double(), built.plain, batch64)
    error = reference().relative_error

    def distance(losses_, params):
        return max([error(g, w) for g, w in zip(losses_, want[0])]
                   + [error(params[n], w) for n, w in want[1].items()])

    return distance(losses, state) <= CONDITIONING * max(distance(*torch32), TOLERANCE)


def _execute(case: TrainingCase, *, mpi: bool, mpi_timeout: float, corrupt: bool) -> Outcome:
    import slicer

    model, loss_fn, plain, batch, optimizer, megatron = build(case)
    want_losses, want_params = torch_reference(case, model, plain, batch)
    try:
        step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer, seed=case.seed,
                                    microbatches=case.microbatches)
    except Exception as exc:  # noqa: BLE001 - classified
        return _error(exc, "train-import")
    try:
        tactics = strategy_tactics(case, step, megatron)
        prog = slicer.compile(step, mesh=slicer.Mesh(**case.mesh), tactics=tactics)
    except Exception as exc:  # noqa: BLE001
        return _error(exc, "train-compile")
    arrays = [t.numpy() for t in batch]
    for ranks in ([None, case.devices] if mpi else [None]):
        stage = "mpi" if ranks else "sim"
        try:
            with prog.session(ranks=ranks, oversubscribe=True, timeout=mpi_timeout) as session:
                losses = [float(session.step(*arrays)) for _ in range(case.steps)]
                state = session.state_dict()
        except Exception as exc:  # noqa: BLE001
            return _error(exc, f"train-run-{stage}", run_stage=True)
        if corrupt:
            losses[0] += 1e-2 * (1 + abs(losses[0]))
        error = reference().relative_error
        worst = max([error(g, w) for g, w in zip(losses, want_losses)]
                    + [error(state[n], w) for n, w in want_params.items()])
        if not worst <= TOLERANCE and not _within_torch_rounding(case, losses, state, (want_losses, want_params)):
            message = f"{case.reproducer().splitlines()[0]}: largest relative error {worst:.3g} (losses {losses} " \
                      f"vs torch {want_losses})"
            return Outcome("wrong", f"train-check-{stage}", "", message,
                           signature("wrong", f"train-check-{stage}", "", ""), worst)
    return Outcome("ok", "train-check-mpi" if mpi else "train-check-sim")
