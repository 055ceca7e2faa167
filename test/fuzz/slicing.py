"""Slicing fuzz cases: a small model that projects its input and cuts the projection by a random chain of
slices, imported (forward with `from_torch`, and a training step) with the cleanup on, partitioned data parallel
and compared with torch eager (runs inside a worker, see `worker.py`, or in-process from the tests).

The import-time cleanup rewrites aligned slices as pieces of an expanded dim (slicer/frontends/pieces.py) and
the concats of equal pieces that are their backward as stacks: this draws the patterns real models cut a fused
projection with. The model: `h = linear(x)` (`x` [B, S, F]), then `STEPS` of a chain, each taking the current
tensor `t` and continuing with one piece of it (the other pieces become outputs):
- `slice`: `t[..., a:b:step]` along a dim (start and stop possibly negative, step 1 or 2);
- `narrow`: `t.narrow(dim, start, length)`;
- `split` / `chunk`: `t.split(size, dim)` / `t.chunk(n, dim)`, one piece kept;
- `unbind`: `t.view(..., k, n / k)` of the last dim, optionally permuted to the front (timm's qkv), `unbind`;
- `rotate_half`: `cat(-x2, x1)` of the halves of the last dim (GPT-NeoX, LLaMA);
- `shuffle`: `cat` of the pieces of `split(size, dim)` in another order, one negated.
The outputs are `tanh` of every piece, flattened and concatenated, and the last piece through a second linear
layer. A case is JSON-able and drawn from a `Source` (source.py: a seed, or hypothesis in the tests).

Classes as in `execute.py`: `ok`; `clean-error` (a documented SlicerError on import or compile, not an internal
one); `internal-error` (anything else, e.g. the cleanup's InternalError, and any failure once compiled); `wrong`
(the forward's outputs or a training loss or final parameter differ from torch's by more than `TOLERANCE`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from .errors import signature
from .execute import Outcome, _error
from .source import RandomSource, Source

TOLERANCE = 1e-4
STEPS = 2  # training steps (SGD)
KINDS = ("slice", "narrow", "split", "chunk", "unbind", "rotate_half", "shuffle")


@dataclass
class SlicingCase:
    features: int  # F, the projection's width
    chain: list  # [{"op": kind, ...}], see the module docstring
    batch: int = 2
    seq: int = 4
    seed: int = 0
    valid: bool = True  # every drawn chain is valid (shapes tracked while drawing)

    @property
    def tactics(self) -> list[str]:
        return ["data"]

    @property
    def devices(self) -> int:
        return 2

    def to_json(self) -> dict:
        return {"slicing": asdict(self)}

    @staticmethod
    def from_json(d: dict) -> SlicingCase:
        return SlicingCase(**d["slicing"])

    def reproducer(self) -> str:
        return (f"slicing case (seed {self.seed}): F={self.features}, chain {self.chain}\n"
                f"replay: python -c \"from fuzz.slicing import *; print(execute_slicing("
                f"generate_slicing_case({self.seed})))\" (from test/)\n")


def generate_slicing_case(seed: int) -> SlicingCase:
    """The case of `seed` (every choice from `RandomSource(seed)`)."""
    return draw_slicing_case(RandomSource(seed), seed=seed)


def draw_slicing_case(source: Source, *, seed: int = 0, max_steps: int = 3) -> SlicingCase:
    """A case drawn from `source`: a chain of 1 to `max_steps` steps on a [B, S, F] projection, each valid for
    the shape the previous ones leave."""
    features = source.choice([8, 12, 16, 24])
    shape = [2, 4, features]
    chain = []
    for _ in range(source.integer(1, max_steps)):
        step = _draw_step(source, shape)
        chain.append(step)
        shape = _shape_after(step, shape)
    return SlicingCase(features, chain, seed=seed)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _draw_step(source: Source, shape: list[int]) -> dict:
    """One step valid on a tensor of `shape` (dim 0, the batch, is never cut: data parallel tiles it)."""
    rank, last = len(shape), shape[-1]
    kinds = [k for k in KINDS if k not in ("rotate_half", "shuffle", "unbind") or last % 2 == 0]
    kind = source.choice(kinds)
    dim = source.choice([d for d in range(1, rank) if shape[d] > 1] or [rank - 1])
    n = shape[dim]
    negative = source.boolean(0.3)  # dims and offsets counted from the end
    shown_dim = dim - rank if negative else dim
    if kind == "slice":
        step = source.choice([1, 1, 2]) if n > 2 else 1
        start = source.integer(0, n - 1)
        stop = source.integer(start + 1, n)
        if negative:
            start, stop = start - n, (stop - n if stop < n else None)
        return {"op": kind, "dim": shown_dim, "start": start, "stop": stop, "step": step}
    if kind == "narrow":
        start = source.integer(0, n - 1)
        return {"op": kind, "dim": shown_dim, "start": start, "length": source.integer(1, n - start)}
    if kind == "split":
        size = source.choice(_divisors(n) if source.boolean(0.7) else list(range(1, n + 1)))
        pieces = -(-n // size)
        return {"op": kind, "dim": shown_dim, "size": size, "keep": source.integer(0, pieces - 1)}
    if kind == "chunk":
        chunks = source.choice(_divisors(n))
        return {"op": kind, "dim": shown_dim, "chunks": chunks, "keep": source.integer(0, chunks - 1)}
    if kind == "unbind":
        k = source.choice([d for d in _divisors(last) if d > 1])
        return {"op": kind, "k": k, "front": source.boolean(0.5), "keep": source.integer(0, k - 1)}
    if kind == "shuffle":
        size = source.choice([d for d in _divisors(last) if d < last])
        order = source.permutation(list(range(last // size)))
        return {"op": kind, "size": size, "order": order, "negate": source.integer(0, len(order) - 1)}
    return {"op": kind}


def _shape_after(step: dict, shape: list[int]) -> list[int]:
    """The shape of the piece `step` continues with (computed by the same code torch runs, on a meta tensor)."""
    import torch

    out, _ = _apply(torch, step, torch.empty(shape, device="meta"))
    return list(out.shape)


def _apply(torch, step: dict, t):
    """(the piece the chain continues with, the other pieces) of `step` on `t`."""
    kind = step["op"]
    if kind == "slice":
        index = [slice(None)] * t.dim()
        index[step["dim"]] = slice(step["start"], step["stop"], step["step"])
        return t[tuple(index)], []
    if kind == "narrow":
        return t.narrow(step["dim"], step["start"], step["length"]), []
    if kind in ("split", "chunk"):
        pieces = (t.split(step["size"], step["dim"]) if kind == "split" else t.chunk(step["chunks"], step["dim"]))
        return pieces[step["keep"]], [p for i, p in enumerate(pieces) if i != step["keep"]]
    if kind == "unbind":
        k = step["k"]
        viewed = t.view(*t.shape[:-1], k, t.shape[-1] // k)
        if step["front"]:  # timm: the pieces' dim first, then unbind(0)
            pieces = viewed.permute(viewed.dim() - 2, *range(viewed.dim() - 2), viewed.dim() - 1).unbind(0)
        else:
            pieces = viewed.unbind(-2)
        return pieces[step["keep"]], [p for i, p in enumerate(pieces) if i != step["keep"]]
    if kind == "rotate_half":
        half = t.shape[-1] // 2
        return torch.cat((-t[..., half:], t[..., :half]), dim=-1), []
    if kind == "shuffle":
        pieces = list(t.split(step["size"], -1))
        pieces[step["negate"]] = -pieces[step["negate"]]
        return torch.cat([pieces[i] for i in step["order"]], dim=-1), []
    raise AssertionError(f"unknown step {kind}")


def build(case: SlicingCase):
    """(model, input x, target) of `case`: torch modules, float32, seeded by the case."""
    import torch
    from torch import nn

    torch.manual_seed(case.seed % (2 ** 31))
    shape = [case.batch, case.seq, case.features]
    for step in case.chain:
        shape = _shape_after(step, shape)

    class Sliced(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(case.features, case.features)
            self.head = nn.Linear(shape[-1], 4)

        def forward(self, x):
            t, outputs = self.proj(x), []
            for step in case.chain:
                t, others = _apply(torch, step, t)
                outputs += others
            outputs = [torch.tanh(p).flatten(1) for p in outputs + [t]] + [self.head(t).flatten(1)]
            return torch.cat(outputs, dim=1)

    model = Sliced()
    x = torch.randn(case.batch, case.seq, case.features)
    with torch.no_grad():
        target = torch.randn_like(model(x))
    return model, x, target


def execute_slicing(case: SlicingCase) -> Outcome:
    """Import, partition (data parallel on 2 simulated devices) and run `case`, forward and training step,
    against torch eager."""
    start = time.perf_counter()
    outcome = _execute(case)
    outcome.seconds = round(time.perf_counter() - start, 3)
    return outcome


def _execute(case: SlicingCase) -> Outcome:
    import numpy as np
    from torch.nn import functional as F

    import slicer
    from slicer import strategies as st

    from .training import reference

    model, x, target = build(case)
    try:
        forward = slicer.from_torch(model.eval(), x)
    except Exception as exc:  # noqa: BLE001 - classified
        return _error(exc, "slicing-import")
    try:
        prog = slicer.compile(forward, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="x", dim=0, axes="x")])
        got = prog.run(x.numpy())
    except Exception as exc:  # noqa: BLE001
        return _error(exc, "slicing-forward")
    want = model(x).detach().numpy()
    error = reference().relative_error(np.asarray(got), want)
    if not error <= TOLERANCE:
        return _wrong("slicing-check-forward", f"{case.reproducer().splitlines()[0]}: forward differs by {error:.3g}",
                      error)

    def loss_fn(model, x, y):
        return F.mse_loss(model(x), y)

    optimizer = slicer.SGD(0.1, momentum=0.9)
    try:
        step = slicer.training_step(model.train(), loss_fn, x, target, optimizer=optimizer)
    except Exception as exc:  # noqa: BLE001
        return _error(exc, "slicing-train-import")
    try:
        prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x"))
        loss_error, param_error = reference().compare(model, loss_fn, (x, target), optimizer, prog, steps=STEPS)
    except Exception as exc:  # noqa: BLE001
        return _error(exc, "slicing-train")
    worst = max(loss_error, param_error)
    if not worst <= TOLERANCE:
        return _wrong("slicing-check-train", f"{case.reproducer().splitlines()[0]}: training differs by {worst:.3g}",
                      worst)
    return Outcome("ok", "slicing-check-train")


def _wrong(stage: str, message: str, error: float) -> Outcome:
    return Outcome("wrong", stage, "", message, signature("wrong", stage, "", ""), error)
