"""Pipeline schedules as values: the order in which each stage runs the forward and backward of each micro-batch.

A `PipelineSchedule` lists, per stage, its `Work` in order: `F` (forward) or `B` (backward) of a micro-batch on one of
the stage's model chunks (`chunk`: the virtual stages of the interleaved schedule; 0 otherwise). The
dependencies are the pipeline's: the forward of micro-batch m on virtual stage v needs v-1's forward of m, its
backward needs v+1's backward of m and its own forward. `verify` proves the orders meet them without a
deadlock, by running the schedule with unit times (a forward 1, a backward 2, as their FLOPs are); the same
run gives each work's start (`timeline`), the bubble fraction (idle time over the stages' total) and the
activations each stage holds at its peak (micro-batches whose forward ran and whose backward did not).

- `gpipe`: every forward, then every backward in reverse (M micro-batches' activations held);
- `one_f_one_b` (1F1B, PipeDream-Flush): S-1-s forwards of warm-up on stage s, then one forward and one
  backward alternately, then the remaining backwards (at most S-s micro-batches held);
- `interleaved` (Megatron's interleaved 1F1B): v model chunks per stage, virtual stage c*S + s on stage s, the
  warm-up longer by (v-1)*S and the bubble v times smaller.

Both GPipe and 1F1B idle for (S-1)/(M+S-1) of the time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slicer.core.errors import InvalidTactic

FORWARD, BACKWARD = "F", "B"
SCHEDULES = ("gpipe", "1f1b", "interleaved")  # tactics.pipeline_tactic.SCHEDULE_NAMES
COST = {FORWARD: 1, BACKWARD: 2}  # unit times of the verification run


@dataclass(frozen=True)
class Work:
    """The forward (`F`) or backward (`B`) of micro-batch `microbatch` on the stage's model chunk `chunk`."""

    kind: str
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


@dataclass(frozen=True)
class Run:
    """A run of a schedule: each stage's works with their start and end times (unit times of the verification
    run, or the seconds `PipelineSchedule.replay` was given)."""

    spans: tuple[tuple[tuple[Work, float, float], ...], ...]
    makespan: float
    bubble: float
    peak: tuple[int, ...]


@dataclass(frozen=True)
class PipelineSchedule:
    """`orders[s]`: stage s's works in order; `chunks`: model chunks per stage (virtual stages = S * chunks)."""

    name: str
    stages: int
    microbatches: int
    orders: tuple[tuple[Work, ...], ...]
    chunks: int = 1

    def virtual_stage(self, stage: int, chunk: int) -> int:
        return chunk * self.stages + stage

    def verify(self) -> Run:
        """The unit-time run of the schedule (module docstring); InvalidTactic naming the first stage that waits
        forever, or a work missing or repeated."""
        expected = sorted((k, m, c) for k in (FORWARD, BACKWARD) for m in range(self.microbatches)
                          for c in range(self.chunks))
        for stage, order in enumerate(self.orders):
            if sorted((w.kind, w.microbatch, w.chunk) for w in order) != expected:
                raise InvalidTactic(f"schedule {self.name}: stage {stage} must run the forward and backward of each "
                                    f"of the {self.microbatches} micro-batches once per chunk; it runs "
                                    f"{' '.join(map(str, order))}")
        return self._run(lambda stage, work: COST[work.kind])

    def replay(self, seconds: Mapping[tuple[str, int], float]) -> Run:
        """The verified schedule run with each work taking `seconds[(kind, virtual stage)]` (e.g. what each
        stage program's calls measured), the transfers taking no time: the bubble those times make."""
        self.verify()
        return self._run(lambda stage, work: seconds[(work.kind, self.virtual_stage(stage, work.chunk))])

    def _ready(self, done: dict, stage: int, work: Work) -> float | None:
        """When `work` of `stage` may start (its inputs' end time), or None while one is not done."""
        last = self.stages * self.chunks - 1
        v = self.virtual_stage(stage, work.chunk)
        if work.kind == FORWARD:
            needs = [] if v == 0 else [(FORWARD, work.microbatch, v - 1)]
        else:
            needs = [(FORWARD, work.microbatch, v)] + ([] if v == last else [(BACKWARD, work.microbatch, v + 1)])
        times = [done[n] for n in needs if n in done]
        return None if len(times) < len(needs) else max(times, default=0)

    def _run(self, cost) -> Run:
        """The works run as soon as their inputs are done and their stage is free, `cost(stage, work)` long."""
        done: dict[tuple, float] = {}
        clock = [0.0] * self.stages
        position = [0] * self.stages
        spans: list[list] = [[] for _ in range(self.stages)]
        total = sum(len(o) for o in self.orders)
        while sum(position) < total:
            progressed = False
            for stage, order in enumerate(self.orders):
                while position[stage] < len(order):
                    work = order[position[stage]]
                    ready = self._ready(done, stage, work)
                    if ready is None:
                        break
                    start = max(ready, clock[stage])
                    clock[stage] = start + cost(stage, work)
                    done[(work.kind, work.microbatch, self.virtual_stage(stage, work.chunk))] = clock[stage]
                    spans[stage].append((work, start, clock[stage]))
                    position[stage] += 1
                    progressed = True
            if not progressed:
                waiting = [f"stage {s} at {o[position[s]]}" for s, o in enumerate(self.orders) if position[s] < len(o)]
                raise InvalidTactic(f"schedule {self.name} deadlocks: {', '.join(waiting)} wait for each other")
        makespan = max(clock)
        busy = sum(cost(s, w) for s, order in enumerate(self.orders) for w in order)
        return Run(tuple(tuple(s) for s in spans), makespan, 1 - busy / (self.stages * makespan),
                   tuple(_peak(order) for order in self.orders))

    def text(self) -> str:
        """Each stage's order, one line per stage: `stage 0: F0 F1 B0 F2 B1 ...`."""
        return "\n".join(f"stage {s}: {' '.join(map(str, o))}" for s, o in enumerate(self.orders))


def _peak(order: tuple[Work, ...]) -> int:
    """The most micro-batch chunks whose forward ran and whose backward did not, along `order`."""
    held = peak = 0
    for work in order:
        held += 1 if work.kind == FORWARD else -1
        peak = max(peak, held)
    return peak


def gpipe(stages: int, microbatches: int) -> PipelineSchedule:
    order = tuple(Work(FORWARD, m) for m in range(microbatches)) + tuple(
        Work(BACKWARD, m) for m in reversed(range(microbatches)))
    return PipelineSchedule("gpipe", stages, microbatches, (order,) * stages)


def one_f_one_b(stages: int, microbatches: int) -> PipelineSchedule:
    orders = []
    for stage in range(stages):
        warmup = min(stages - 1 - stage, microbatches)
        order = [Work(FORWARD, m) for m in range(warmup)]
        for m in range(warmup, microbatches):
            order += [Work(FORWARD, m), Work(BACKWARD, m - warmup)]
        order += [Work(BACKWARD, m) for m in range(microbatches - warmup, microbatches)]
        orders.append(tuple(order))
    return PipelineSchedule("1f1b", stages, microbatches, tuple(orders))


def interleaved(stages: int, microbatches: int, chunks: int) -> PipelineSchedule:
    """Megatron-LM's interleaved 1F1B (`get_forward_backward_func`, virtual pipeline): micro-batches in groups
    of S, each group's forwards run on chunk 0, then 1, ...; backwards on the chunks in reverse."""
    if microbatches % stages:
        raise InvalidTactic(f"the interleaved schedule needs microbatches ({microbatches}) to be a multiple of the "
                            f"stages ({stages})")
    total = microbatches * chunks

    def forward(k: int) -> Work:
        group, rest = divmod(k, stages * chunks)
        return Work(FORWARD, group * stages + rest % stages, rest // stages)

    def backward(k: int) -> Work:
        group, rest = divmod(k, stages * chunks)
        return Work(BACKWARD, group * stages + rest % stages, chunks - 1 - rest // stages)

    orders = []
    for stage in range(stages):
        warmup = min((stages - stage - 1) * 2 + (chunks - 1) * stages, total)
        order = [forward(k) for k in range(warmup)]
        for k in range(warmup, total):
            order += [forward(k), backward(k - warmup)]
        order += [backward(k) for k in range(total - warmup, total)]
        orders.append(tuple(order))
    return PipelineSchedule("interleaved", stages, microbatches, tuple(orders), chunks)


def make_schedule(name: str, stages: int, microbatches: int, chunks: int = 1) -> PipelineSchedule:
    """The schedule `name` (one of `SCHEDULES`), verified; InvalidTactic for a bad name or count."""
    if name not in SCHEDULES:
        raise InvalidTactic(f"pipeline: schedule={name!r} must be one of {', '.join(SCHEDULES)}")
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
        raise InvalidTactic(f"pipeline: microbatches={microbatches!r} must be an integer >= 1")
    if (chunks != 1) != (name == "interleaved"):
        raise InvalidTactic(f"pipeline: virtual_stages={chunks} goes with schedule='interleaved' (virtual_stages "
                            "> 1) and only with it")
    schedule = (gpipe(stages, microbatches) if name == "gpipe" else one_f_one_b(stages, microbatches)
                if name == "1f1b" else interleaved(stages, microbatches, chunks))
    schedule.verify()
    return schedule


__all__ = ["BACKWARD", "FORWARD", "PipelineSchedule", "Run", "SCHEDULES", "Work", "gpipe", "interleaved",
           "make_schedule", "one_f_one_b"]
