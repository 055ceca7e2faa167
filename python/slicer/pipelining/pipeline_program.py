"""`PipelineProgram`: a training step compiled under a `Pipeline` tactic (`stage_compile.py`).

    prog = slicer.compile(step, mesh=slicer.Mesh(p=2), tactics=st.pipeline(step, "p", split=["blocks.1"],
                                                                           microbatches=4))
    print(prog.explain())                       # the schedule, each stage's order, bubble, activations held
    losses, state = prog.train([batch1, batch2, batch3], ranks=2)

`train` runs one step per batch (a tuple of the step's batch tensors), starting from the step's bound state (the
model's parameters, the optimizer's initial state), in a session (`prog.session(ranks)`, `pipeline_session.py`):
in this process (`ranks=None`: every stage's programs on the simulator, the transfers between them in memory)
or on MPI ranks (`runtime.jobs.pipeline_rank`); it returns each step's loss and the final state by name
(parameters, buffers and optimizer state).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slicer.core.arrays import as_array
from slicer.core.errors import RunError
from slicer.core.mesh import Mesh
from slicer.frontends.accumulation import micro_batch
from slicer.mpmd.pipeline_schedule import BACKWARD, FORWARD, PipelineSchedule
from slicer.tactics.pipeline_tactic import Pipeline

from .pipeline_session import LaunchedPipelineSession, LocalPipelineSession, PipelineSession, check_batch


@dataclass
class PipelineProgram:
    """The stages' programs (`programs`: callee name -> `slicer.Program`), the schedule, the pipelined module
    (`text`) and its lowering (`stages`: each stage's instructions)."""

    step: Any
    mesh: Mesh
    pipeline: Pipeline
    schedule: PipelineSchedule
    stage_programs: tuple
    programs: dict
    text: str
    stages: tuple
    split: tuple = ()  # the split points used (found by the cost model for stages=N)
    timeline: list | None = None  # the last MPI run's last step: per rank (stage, [(callee, start, end, cpu), ...])
    resident_growth: list | None = None  # the last MPI run: per rank, bytes its resident peak grew by in the steps

    def explain(self) -> str:
        """The schedule per stage, its bubble fraction and each stage's activations held at the peak."""
        run = self.schedule.verify()
        s, m = self.schedule.stages, self.schedule.microbatches
        lines = [f"{self.pipeline} on mesh {self.mesh}: {s} stages (split at {', '.join(self.split)}), "
                 f"{m} micro-batches, schedule "
                 f"{self.schedule.name}" + (f" ({self.schedule.chunks} chunks per stage)"
                                            if self.schedule.chunks > 1 else "")]
        for stage in self.stage_programs:
            sent = ", ".join(f"{t.name} {list(t.shape)} {t.dtype} -> stage(s) {list(t.targets)}" for t in stage.sent)
            lines.append(f"virtual stage {stage.index}: {len(stage.parameters)} trained parameters "
                         f"({sum(int(np.prod(_shape(self.step, stage, p))) for p in stage.parameters)} values)"
                         + (f"; sends {sent}" if sent else ""))
        lines += [line for stage in self.stage_programs for line in _remat_lines(stage)]
        lines.append(self.schedule.text())
        ideal = (s - 1) / (m + s - 1)
        lines.append(f"bubble: {run.bubble:.3f} of the stages' time (forward 1, backward 2; (S-1)/(M+S-1) = "
                     f"{ideal:.3f})")
        for stage, (peak, held) in enumerate(zip(run.peak, self.held_bytes())):
            lines.append(f"stage {stage}: at most {peak} micro-batch(es) in flight, holding {peak} x {held} bytes "
                         "of activations per device (received, and saved by the forward for the backward)")
        return "\n".join(lines)

    def held_bytes(self) -> list[int]:
        """Per stage, the bytes per device it keeps for one micro-batch from its forward to its backward: the
        values it received and those its forward saved (arguments of its backward; averaged over its model
        chunks)."""
        held = []
        for stage in range(self.schedule.stages):
            chunks = [v for v in self.stage_programs if v.index % self.schedule.stages == stage]
            total = 0
            for v in chunks:
                kept = {*v.saved, *(t.name for t in v.received)}
                report = self.programs[f"backward_{v.index}"].memory()
                total += sum(b.bytes_per_device for b, name in zip(report.arguments, v.backward.arg_names)
                             if name in kept)
            held.append(total // max(1, len(chunks)))
        return held

    def measured_bubble(self) -> float:
        """The idle fraction of the stages' time in the last MPI run's last step (`timeline`): 1 - the ranks'
        busy time over ranks x the span from the first call's start to the last call's end."""
        if not self.timeline:
            raise RunError("measured_bubble needs a run on MPI ranks first: prog.train(batches, ranks=N)")
        calls = [e for _, events in self.timeline for e in events]
        span = max(e[2] for e in calls) - min(e[1] for e in calls)
        busy = sum(e[2] - e[1] for e in calls)
        return 1 - busy / (len(self.timeline) * span)

    def cpu_bubble(self) -> float:
        """The bubble of the last MPI run's last step (`timeline`) replayed from the CPU seconds each call took: the
        schedule run (`PipelineSchedule.replay`) with every forward and backward taking its program's median
        CPU time over the step's calls, and each stage's updates after its last backward. On a machine whose
        cores other jobs share, a call's wall time measures the sharing as much as the work; this is the bubble
        the stages' work itself makes, next to `measured_bubble`."""
        if not self.timeline:
            raise RunError("cpu_bubble needs a run on MPI ranks first: prog.train(batches, ranks=N)")
        times: dict[str, list[float]] = {}
        for _, events in self.timeline:
            for callee, _, _, cpu in events:
                times.setdefault(callee, []).append(cpu)
        seconds = {name: statistics.median(values) for name, values in times.items()}
        kinds = {FORWARD: "forward", BACKWARD: "backward"}
        run = self.schedule.replay({(k, v.index): seconds[f"{kinds[k]}_{v.index}"] for k in kinds
                                    for v in self.stage_programs})
        updates = [sum(seconds[f"update_{v.index}"] for v in self.stage_programs
                       if v.index % self.schedule.stages == stage) for stage in range(self.schedule.stages)]
        ends = [(spans[-1][2] if spans else 0.0) + u for spans, u in zip(run.spans, updates)]
        busy = sum(end - start for spans in run.spans for _, start, end in spans) + sum(updates)
        return 1 - busy / (self.schedule.stages * max(ends))

    def timeline_text(self, width: int = 80) -> str:
        """The last MPI run's last step as one row per rank over `width` columns: `F` forward, `B` backward,
        `U` update, `.` idle (waiting for a transfer: the bubble)."""
        if not self.timeline:
            raise RunError("timeline_text needs a run on MPI ranks first: prog.train(batches, ranks=N)")
        calls = [e for _, events in self.timeline for e in events]
        start, end = min(e[1] for e in calls), max(e[2] for e in calls)
        scale = width / max(end - start, 1e-12)
        rows = []
        for rank, (stage, events) in enumerate(self.timeline):
            row = ["."] * width
            for callee, first, last, *_ in events:
                for column in range(int((first - start) * scale), max(int((last - start) * scale), 1 +
                                                                       int((first - start) * scale))):
                    row[min(column, width - 1)] = callee[0].upper()
            rows.append(f"rank {rank} (stage {stage}) {''.join(row)}")
        return "\n".join(rows + [f"{(end - start) * 1e3:.1f} ms, bubble {self.measured_bubble():.3f}"])

    def memory(self) -> list[dict[str, int]]:
        """Bytes per device of each stage: its parameters, buffers and optimizer state (`state`), its
        accumulated gradients (`gradients`), the activations it holds at the schedule's peak
        (`activations`: micro-batches in flight x `held_bytes`) and the largest peak of one of its
        programs beyond its arguments (`working`: the forward, backward or update running), and their sum
        (`peak`): what the stage needs at most while it runs. Under remat, `recomputed`: the activations its
        forward no longer saves at that peak (micro-batches in flight x `StagePrograms.remat`'s recomputed bytes,
        averaged over its model chunks; whole micro-batches, which the stage's other axes split further)."""
        run = self.schedule.verify()
        held = self.held_bytes()
        reports = {name: program.memory() for name, program in self.programs.items()}
        figures = []
        for stage in range(self.schedule.stages):
            chunks = [v for v in self.stage_programs if v.index % self.schedule.stages == stage]
            mine = {n: r for n, r in reports.items() if int(n.rsplit("_", 1)[1]) in {v.index for v in chunks}}
            update = [reports[f"update_{v.index}"] for v in chunks]
            owned = [(b.bytes_per_device, role) for r in update for b, role in zip(r.arguments, r.roles)]
            state = sum(size for size, role in owned if role in ("parameter", "buffer", "state"))
            grads = sum(size for size, role in owned if role == "input")
            activations = run.peak[stage] * held[stage]
            working = max(r.peak - r.argument_bytes for r in mine.values())
            figures.append({"stage": stage, "state": state, "gradients": grads, "activations": activations,
                            "working": working, "peak": state + grads + activations + working})
            recomputed = sum(u.recomputed for v in chunks for u in v.remat) // max(1, len(chunks))
            if recomputed:
                figures[-1]["recomputed"] = run.peak[stage] * recomputed
        return figures

    def initial_state(self) -> dict[str, np.ndarray]:
        """Every parameter, buffer, optimizer state value and hyperparameter the stages start from."""
        state: dict[str, np.ndarray] = {}
        for stage in self.stage_programs:
            for program in (stage.forward, stage.update):
                names = program.arg_names[program.num_inputs:]
                state.update({n: as_array(v) for n, v in zip(names, program.parameters)})
        return state

    def state_names(self) -> set[str]:
        """The names of the state: every stage's parameters, buffers and optimizer state."""
        return {n for s in self.stage_programs for n in (*s.parameters, *s.buffers, *s.state)}

    def plan(self) -> dict:
        """What the ranks run (`runtime.jobs.pipeline_rank`): the mesh, the pipeline axis, each stage's
        arguments, results and instructions."""
        return {"mesh": [list(a) for a in self.mesh.axes], "pipeline_axis": self.pipeline.axis,
                "stages": [{"index": s.index, "args": list(s.args), "results": list(s.results),
                            "instructions": [dict(i) for i in s.instructions]} for s in self.stages]}

    def step_values(self, number: int, batch: Sequence, given: Mapping | None = None) -> dict[str, np.ndarray]:
        """Step `number`'s values: the batch cut into micro-batches (`x.m0`, ...) and the hyperparameters (the
        optimizer's at that step, or `given`)."""
        names = self.step.input_names
        check_batch(names, batch)
        m = self.schedule.microbatches
        values = {f"{n}.m{i}": np.ascontiguousarray(micro_batch(as_array(t), i, m))
                  for n, t in zip(names, batch) for i in range(m)}
        hyper = self.step.hyperparameters(number, dict(given or {})) if self.step.hyperparameters else {}
        values.update({n: np.asarray(v, dtype=np.float64) for n, v in hyper.items()})
        return values

    def session(self, ranks: int | None = None, *, mpiexec: str | None = None,
                timeout: float = 600) -> PipelineSession:
        """A session (`pipeline_session`): every stage in this process (`ranks=None`) or on `ranks` MPI ranks
        (the mesh's device count), loaded once; each `step(*batch)` sends the step's micro-batches only."""
        if ranks is None:
            return LocalPipelineSession(self)
        if ranks != self.mesh.device_count:
            raise RunError(f"the pipelined program runs on {self.mesh.device_count} ranks (mesh {self.mesh}), "
                           f"not {ranks}")
        return LaunchedPipelineSession(self, mpiexec=mpiexec, timeout=timeout)

    def train(self, batches: Sequence[Sequence], *, ranks: int | None = None,
              timeout: float = 600) -> tuple[list[float], dict[str, np.ndarray]]:
        """One step per batch (module docstring), in a session: (losses, final state by name). On ranks, the
        last step's `timeline` and each rank's `resident_growth` are kept."""
        with self.session(ranks, timeout=timeout) as session:
            losses = [session.step(*batch) for batch in batches]
            if isinstance(session, LaunchedPipelineSession):
                self.timeline, self.resident_growth = session.timeline()
            return losses, session.state_dict()


def _remat_lines(stage) -> list[str]:
    """What remat did to the virtual stage `stage`'s modules, one line per policy (`StagePrograms.remat`)."""
    lines = []
    for policy in dict.fromkeys(u.policy for u in stage.remat):
        units = [u for u in stage.remat if u.policy == policy]
        lines.append(f"virtual stage {stage.index}: remat {policy} on {', '.join(u.name for u in units)}: their "
                     f"forward saves {sum(u.saved for u in units)} bytes per micro-batch for the backward, which "
                     f"recomputes {sum(u.cloned for u in units)} ops instead of holding "
                     f"{sum(u.recomputed for u in units)} bytes more (the whole micro-batch's, before the "
                     "stage's other axes split it)")
    return lines


def _shape(step, stage, name: str) -> tuple[int, ...]:
    program = stage.update
    position = program.arg_names.index(name) - program.num_inputs
    return tuple(np.shape(program.parameters[position]))


__all__ = ["PipelineProgram"]
