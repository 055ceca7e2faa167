"""A training step re-imported as pipeline stages (`slicer.strategies.pipeline`): the torch model, loss function,
example batch and optimizer `training_step` was given (`StepOrigin`, kept on the step), cut at the split
points (`stage_split.py`) and imported as each stage's forward, backward and update (`stage_programs.py`),
traced on one micro-batch (rows 0, M, 2M, ... of every batch tensor, `accumulation.micro_batch`).

What a pipelined step cannot do yet is refused here, saying so: gradient clipping (its global norm spans the
stages), mixed precision, and the training step's own micro-batches (the pipeline's `microbatches` replace
them).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from slicer.core.errors import FrontendError

from .accumulation import check_microbatches, micro_batch
from .stage_balance import balanced_split, unit_costs
from .stage_programs import StagePrograms, stage_programs
from .stage_split import StageGraph, Transfer, split_forward, split_points
from .torch_import import load_torch

LOWERING_THREADS = 2  # torch-mlir-opt children running while the next stage program is traced


@dataclass(frozen=True)
class StepOrigin:
    """What `training_step` imported a step from, so the step can be imported again by stage."""

    model: Any
    loss_fn: Any
    batch: tuple
    batch_names: tuple[str, ...]
    optimizer: Any
    microbatches: int
    precision: Any
    seed: int


def import_stages(origin: StepOrigin, split, microbatches: int, stages: int | None = None, remat: Sequence = ()
                  ) -> tuple[tuple[StagePrograms, ...], tuple[Transfer, ...], tuple[str, ...]]:
    """Every stage's programs, the transfers between them and the split points, for `microbatches`
    micro-batches; `split` None: `stages` stages balanced by their FLOPs (`stage_balance.py`); `remat`: the
    `Remat` tactics whose modules each stage's backward recomputes (`stage_partition.py`)."""
    torch, fx = load_torch()
    if origin.precision is not None or origin.microbatches != 1:
        raise FrontendError("pipeline: import the step without microbatches= and precision= (the pipeline's "
                            "microbatches= replace the step's; mixed precision is not pipelined yet)")
    if getattr(origin.optimizer, "clip_grad_norm", None) is not None:
        raise FrontendError("pipeline: gradient clipping by global norm spans the stages and is not pipelined yet; "
                            "drop clip_grad_norm= from the optimizer")
    check_microbatches(microbatches, origin.batch)
    model, optimizer = origin.model, origin.optimizer
    example = [micro_batch(t, 0, microbatches) for t in origin.batch]
    if split is None:
        split = balanced_split(unit_costs(torch, model, origin.loss_fn, example), stages or 2)
    points = split_points(model, split, stages)
    params = dict(model.named_parameters())
    buffers = {n: b for n, b in model.named_buffers() if n not in params}
    trained = [n for n, p in params.items() if p.requires_grad]
    owned = {**{n: p.detach() for n, p in params.items()}, **{n: b.detach() for n, b in buffers.items()}}
    names = [*owned, *origin.batch_names]
    graphs = split_forward(torch, model, origin.loss_fn, names, [*owned.values(), *example], len(owned), points)
    values = dict(zip(names, [*owned.values(), *example]))
    transfers = _transfers(torch, graphs, values)
    state = {n: torch.zeros_like(params[p].detach()) for p in trained for n in optimizer.state_names(p)}
    state.update({n: torch.zeros((), dtype=torch.float32) for n in optimizer.shared_state()})
    hyper = {n: torch.tensor(v, dtype=torch.float64)
             for n, v in optimizer.hyperparameter_values(0, at_import=True).items()}
    last = len(graphs) - 1
    with ThreadPoolExecutor(max_workers=LOWERING_THREADS) as pool:  # torch-mlir's lowerings beside the tracing
        pending = [stage_programs(torch, fx, g, transfers, values, set(origin.batch_names), set(trained), optimizer,
                                  microbatches, state, hyper, g.index == last, pool, remat) for g in graphs]
        programs = tuple(p() for p in pending)
    return programs, tuple(transfers.values()), tuple(points)


def _transfers(torch, graphs: list[StageGraph], values: dict) -> dict[str, Transfer]:
    """The transfers between `graphs`, found by running them in order on the example values (which gains each
    transfer's example value)."""
    readers: dict[str, list[int]] = {}
    for graph in graphs:
        for name in graph.inputs:
            readers.setdefault(name, []).append(graph.index)
    transfers: dict[str, Transfer] = {}
    with torch.no_grad():
        for graph in graphs[:-1]:
            module: Any = graph.module
            out = module(*(values[n] for n in graph.inputs))
            for name, value in zip(graph.outputs, out if isinstance(out, (tuple, list)) else (out,)):
                values[name] = value
                transfers[name] = Transfer(name, graph.index, tuple(readers[name]), tuple(value.shape),
                                           str(value.dtype).removeprefix("torch."), value.is_floating_point())
    return transfers


__all__ = ["StepOrigin", "import_stages"]
